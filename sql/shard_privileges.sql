--
-- shard_privileges: a shard belongs to the role that created it.  Its owner
-- (or a member of the owner's role) may drop it, move its since and grant
-- or revoke append and read on it; other roles need a grant for each.
-- Membership in persist_sink_writer or persist_sink_reader stays the first
-- gate, and an error says which role or privilege is missing.
--
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS persist_sink;
RESET client_min_messages;
\i sql/include/no_compaction.psql

\i sql/include/err.psql

-- alice and bob write and read; carol only reads, through the group team;
-- ops is a member of alice's role; dave is in no role of ours
CREATE ROLE regress_sp_alice IN ROLE persist_sink_writer, persist_sink_reader;
CREATE ROLE regress_sp_bob IN ROLE persist_sink_writer, persist_sink_reader;
CREATE ROLE regress_sp_team;
CREATE ROLE regress_sp_carol IN ROLE persist_sink_reader, regress_sp_team;
CREATE ROLE regress_sp_ops IN ROLE regress_sp_alice;
CREATE ROLE regress_sp_dave;

\i sql/include/as_role.psql

-- Every call a shard's privileges govern, on shard s
CREATE FUNCTION pg_temp.calls(s text) RETURNS TABLE (what text, q text)
LANGUAGE sql AS $$
VALUES
	('append', format($q$SELECT persist_sink.append(%L, '{k}'::text[], '{v}'::text[], '{1}') > 0$q$, s)),
	('compare_and_append', format($q$SELECT persist_sink.compare_and_append(%L, '{k}'::text[], '{v}'::text[], ARRAY[persist_sink.shard_upper(%L)], '{1}', persist_sink.shard_upper(%L), persist_sink.shard_upper(%L) + 1)$q$, s, s, s, s)),
	('compact', format($q$SELECT persist_sink.compact(%L)$q$, s)),
	('snapshot', format($q$SELECT count(*) FROM persist_sink.snapshot(%L)$q$, s)),
	('listen', format($q$SELECT count(*) FROM persist_sink.listen(%L, -1)$q$, s)),
	('batches', format($q$SELECT count(*) FROM persist_sink.batches(%L)$q$, s)),
	('verify', format($q$SELECT count(*) FROM persist_sink.verify(%L)$q$, s)),
	('shard_upper', format($q$SELECT persist_sink.shard_upper(%L)$q$, s)),
	('shard_since', format($q$SELECT persist_sink.shard_since(%L)$q$, s)),
	('wait_upper', format($q$SELECT persist_sink.wait_upper(%L, 0, '1ms')$q$, s)),
	('downgrade_since', format($q$SELECT persist_sink.downgrade_since(%L, 0)$q$, s)),
	('grant_shard', format($q$SELECT persist_sink.grant_shard(%L, 'regress_sp_dave', 'read')$q$, s)),
	('revoke_shard', format($q$SELECT persist_sink.revoke_shard(%L, 'regress_sp_dave', 'read')$q$, s))
$$;

-- What each role may do on shard s: ok or the SQLSTATE
CREATE FUNCTION pg_temp.matrix(s text)
RETURNS TABLE (what text, alice text, ops text, bob text, carol text)
LANGUAGE sql AS $$
	SELECT what,
		   left(pg_temp.as_role('regress_sp_alice', q), 5),
		   left(pg_temp.as_role('regress_sp_ops', q), 5),
		   left(pg_temp.as_role('regress_sp_bob', q), 5),
		   left(pg_temp.as_role('regress_sp_carol', q), 5)
	FROM pg_temp.calls(s)
$$;

--
-- A shard alice creates is hers, with no grant
--
SET ROLE regress_sp_alice;
SELECT create_shard('sp_a');
SELECT append('sp_a', '{a}'::text[], '{1}'::text[], '{1}') > 0 AS appended;
RESET ROLE;
SELECT name, owner, privileges FROM shards WHERE name = 'sp_a';
SELECT shard, owner, acl FROM persist_sink.shard_acl WHERE shard = 'sp_a';
-- alice and ops (a member of her role) may do everything; bob, a writer
-- and reader too, nothing; carol, a reader, neither (and no writes at all)
SELECT * FROM pg_temp.matrix('sp_a');

-- The errors say what is missing and who may grant it
SET ROLE regress_sp_bob;
\set VERBOSITY default
SELECT append('sp_a', '{b}'::text[], '{1}'::text[], '{1}');
SELECT count(*) FROM snapshot('sp_a');
SELECT shard_upper('sp_a');
SELECT drop_shard('sp_a');
SELECT grant_shard('sp_a', 'regress_sp_bob', 'append');
SET ROLE regress_sp_carol;
SELECT append('sp_a', '{c}'::text[], '{1}'::text[], '{1}');
SET ROLE regress_sp_dave;
SELECT count(*) FROM persist_sink.snapshot('sp_a');
RESET ROLE;
\set VERBOSITY terse

--
-- Grants: append to bob, read to the group team (so to carol)
--
SET ROLE regress_sp_alice;
SELECT grant_shard('sp_a', 'regress_sp_bob', 'append');
SELECT grant_shard('sp_a', 'regress_sp_team', 'read');
RESET ROLE;
SELECT name, privileges FROM shards WHERE name = 'sp_a';
-- bob appends (and compacts, and sees the upper) but does not read; carol
-- reads; neither may drop, move since or grant
SELECT * FROM pg_temp.matrix('sp_a');
-- the same grant twice is one grant; all is append and read
SET ROLE regress_sp_alice;
SELECT grant_shard('sp_a', 'regress_sp_bob', 'append');
SELECT grant_shard('sp_a', 'regress_sp_bob', 'all');
RESET ROLE;
SELECT name, privileges FROM shards WHERE name = 'sp_a';
SELECT pg_temp.as_role('regress_sp_bob', $$SELECT count(*) FROM persist_sink.snapshot('sp_a')$$) AS bob_reads;

--
-- Revokes take effect at once, in this session as in others (see the
-- isolation spec shard_grants)
--
SET ROLE regress_sp_ops;
SELECT revoke_shard('sp_a', 'regress_sp_bob', 'read');
RESET ROLE;
SELECT pg_temp.as_role('regress_sp_bob', $$SELECT count(*) FROM persist_sink.snapshot('sp_a')$$) AS bob_reads;
SELECT pg_temp.as_role('regress_sp_bob', $$SELECT persist_sink.append('sp_a', '{b}'::text[], '{1}'::text[], '{1}') > 0$$) AS bob_appends;
SET ROLE regress_sp_alice;
SELECT revoke_shard('sp_a', 'regress_sp_bob', 'all');
-- revoking what was never granted changes nothing
SELECT revoke_shard('sp_a', 'regress_sp_carol', 'append');
RESET ROLE;
SELECT name, privileges FROM shards WHERE name = 'sp_a';
SELECT pg_temp.as_role('regress_sp_bob', $$SELECT persist_sink.append('sp_a', '{b}'::text[], '{1}'::text[], '{1}') > 0$$) AS bob_appends;

-- A grant in a transaction that rolls back is no grant
BEGIN;
SET LOCAL ROLE regress_sp_alice;
SELECT grant_shard('sp_a', 'regress_sp_bob', 'append');
ROLLBACK;
SELECT pg_temp.as_role('regress_sp_bob', $$SELECT persist_sink.append('sp_a', '{b}'::text[], '{1}'::text[], '{1}') > 0$$) AS bob_appends;

-- PUBLIC: read for every reader (still only members of persist_sink_reader:
-- dave is refused by the role gate)
SET ROLE regress_sp_alice;
SELECT grant_shard('sp_a', 'public', 'read');
RESET ROLE;
SELECT pg_temp.as_role('regress_sp_bob', $$SELECT count(*) FROM persist_sink.snapshot('sp_a')$$) AS bob_reads;
SELECT pg_temp.as_role('regress_sp_dave', $$SELECT count(*) FROM persist_sink.snapshot('sp_a')$$) AS dave_reads;
SELECT name, privileges FROM shards WHERE name = 'sp_a';

-- Role names are exact, as in GRANT: only public in lower case is PUBLIC;
-- "Public" is a role of that name, and PUBLIC one that does not exist
CREATE ROLE "Public" IN ROLE persist_sink_reader;
SET ROLE regress_sp_alice;
SELECT create_shard('sp_p');
SELECT grant_shard('sp_p', 'Public', 'read');
RESET ROLE;
SELECT name, privileges FROM shards WHERE name = 'sp_p';
SELECT pg_temp.as_role('Public', $$SELECT count(*) FROM persist_sink.snapshot('sp_p')$$) AS public_role_reads;
SELECT pg_temp.as_role('regress_sp_bob', $$SELECT count(*) FROM persist_sink.snapshot('sp_p')$$) AS bob_reads;
SET ROLE regress_sp_alice;
SELECT grant_shard('sp_p', 'public', 'read');
SELECT revoke_shard('sp_p', 'Public', 'read');
RESET ROLE;
SELECT name, privileges FROM shards WHERE name = 'sp_p';
SET ROLE regress_sp_alice;
SELECT pg_temp.err($$SELECT persist_sink.grant_shard('sp_p', 'PUBLIC', 'append')$$);
SELECT pg_temp.err($$SELECT persist_sink.revoke_shard('sp_p', 'PUBLIC', 'read')$$);
SELECT pg_temp.err($$SELECT persist_sink.alter_shard_owner('sp_p', 'public')$$);
SELECT revoke_shard('sp_p', 'public', 'read');
RESET ROLE;
SELECT name, privileges FROM shards WHERE name = 'sp_p';
DROP ROLE "Public";

--
-- Bad arguments
--
SET ROLE regress_sp_alice;
SELECT pg_temp.err($$SELECT persist_sink.grant_shard('sp_a', 'regress_sp_nobody', 'read')$$);
SELECT pg_temp.err($$SELECT persist_sink.grant_shard('sp_a', 'regress_sp_bob', 'write')$$);
SELECT pg_temp.err($$SELECT persist_sink.grant_shard('sp_nope', 'regress_sp_bob', 'read')$$);
SELECT pg_temp.err($$SELECT persist_sink.grant_shard(NULL, 'regress_sp_bob', 'read')$$);
SELECT pg_temp.err($$SELECT persist_sink.grant_shard('sp_a', NULL, 'read')$$);
SELECT pg_temp.err($$SELECT persist_sink.revoke_shard('sp_a', 'regress_sp_bob', NULL)$$);
SELECT pg_temp.err($$SELECT persist_sink.grant_shard('a/b', 'regress_sp_bob', 'read')$$);
RESET ROLE;
-- in a read-only transaction
BEGIN READ ONLY;
SELECT pg_temp.err($$SELECT persist_sink.grant_shard('sp_a', 'regress_sp_bob', 'read')$$);
ROLLBACK;

--
-- The privileges are in a storage table only the extension writes
--
SET ROLE regress_sp_alice;
SELECT pg_temp.err($$SELECT * FROM persist_sink.shard_acl$$);
SELECT pg_temp.err($$UPDATE persist_sink.shard_acl SET owner = 'regress_sp_alice'$$);
RESET ROLE;

--
-- A superuser may do everything on any shard
--
SELECT count(*) > 0 AS superuser_reads FROM snapshot('sp_a');
SELECT downgrade_since('sp_a', 1);

--
-- alter_shard_owner: the caller must have the privileges of the owner and
-- of the new owner; the grants go along, granted by the new owner
--
SET ROLE regress_sp_alice;
SELECT pg_temp.err($$SELECT persist_sink.alter_shard_owner('sp_a', 'regress_sp_bob')$$);
SELECT pg_temp.err($$SELECT persist_sink.alter_shard_owner('sp_a', 'regress_sp_nobody')$$);
SET ROLE regress_sp_bob;
SELECT pg_temp.err($$SELECT persist_sink.alter_shard_owner('sp_a', 'regress_sp_bob')$$);
RESET ROLE;
SELECT alter_shard_owner('sp_a', 'regress_sp_bob');
SELECT name, owner, privileges FROM shards WHERE name = 'sp_a';
SELECT pg_temp.as_role('regress_sp_alice', $$SELECT persist_sink.append('sp_a', '{a}'::text[], '{1}'::text[], '{1}') > 0$$) AS alice_appends;
SELECT pg_temp.as_role('regress_sp_bob', $$SELECT persist_sink.grant_shard('sp_a', 'regress_sp_alice', 'all')$$) AS bob_grants;
SELECT pg_temp.as_role('regress_sp_alice', $$SELECT persist_sink.append('sp_a', '{a}'::text[], '{1}'::text[], '{1}') > 0$$) AS alice_appends;
-- a role may give its shard to a role it is a member of
GRANT regress_sp_ops TO regress_sp_bob;
SELECT pg_temp.as_role('regress_sp_bob', $$SELECT persist_sink.alter_shard_owner('sp_a', 'regress_sp_ops')$$) AS bob_gives;
REVOKE regress_sp_ops FROM regress_sp_bob;
SELECT name, owner FROM shards WHERE name = 'sp_a';

--
-- Dropped: the privileges go with the shard; the same name created by bob
-- is bob's, with no grant
--
SET ROLE regress_sp_ops;
SELECT drop_shard('sp_a');
RESET ROLE;
SELECT count(*) AS acl_rows FROM persist_sink.shard_acl WHERE shard = 'sp_a';
SET ROLE regress_sp_bob;
SELECT create_shard('sp_a');
RESET ROLE;
SELECT name, owner, privileges FROM shards WHERE name = 'sp_a';
SELECT pg_temp.as_role('regress_sp_alice', $$SELECT count(*) FROM persist_sink.snapshot('sp_a')$$) AS alice_reads;

--
-- A shard with no row in shard_acl (made before 0.9, or restored from an
-- older dump) has the privileges every shard had: owned by the extension's
-- owner, append for persist_sink_writer, read for persist_sink_reader
--
SELECT create_shard('sp_old');
DELETE FROM persist_sink.shard_acl WHERE shard = 'sp_old';
SELECT s.owner = e.extowner::regrole AS owned_by_extension_owner,
	   (SELECT string_agg(a.privilege_type || ' to ' || a.grantee::regrole, ', '
						  ORDER BY a.privilege_type)
		FROM aclexplode(s.privileges) a) AS grants
FROM shards s, pg_extension e WHERE e.extname = 'persist_sink' AND s.name = 'sp_old';
SELECT * FROM pg_temp.matrix('sp_old');
-- its owner's first grant records its row, with what it had and the grant
SELECT grant_shard('sp_old', 'regress_sp_dave', 'read');
SELECT (SELECT string_agg(a.privilege_type || ' to ' || a.grantee::regrole, ', '
						  ORDER BY a.grantee::regrole::text)
		FROM aclexplode(acl) a) AS grants
FROM persist_sink.shard_acl WHERE shard = 'sp_old';

-- Clean up
SELECT drop_shard(name) FROM shards WHERE name LIKE 'sp\_%';
DROP ROLE regress_sp_ops, regress_sp_carol, regress_sp_team, regress_sp_bob,
	regress_sp_alice, regress_sp_dave;
ALTER SYSTEM RESET persist_sink.compaction;
SELECT pg_reload_conf();
