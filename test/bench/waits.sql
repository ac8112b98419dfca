-- Samples pg_stat_activity every 20 ms, :samples times, and prints what
-- each kind of process was doing as markdown table rows: the share of its
-- samples in each state and wait event ("CPU": no wait event).  Run by
-- test/bench/run --waits during the sustained workload.  Client backends
-- other than this one count as "client"; a sink worker that never served
-- an interval shows as state "-".
CREATE TEMP TABLE wait_samples (kind text, what text);
-- psql does not substitute variables inside the DO block's quotes
SET bench.wait_samples = :'samples';
DO $$
BEGIN
	FOR i IN 1 .. current_setting('bench.wait_samples')::int LOOP
		PERFORM pg_stat_clear_snapshot();
		INSERT INTO wait_samples
		SELECT CASE WHEN backend_type LIKE 'persist_sink%' THEN backend_type
					ELSE 'client' END,
			   coalesce(state, '-') || ': ' ||
			   coalesce(wait_event_type || ' ' || wait_event, 'CPU')
		  FROM pg_stat_activity
		 WHERE pid <> pg_backend_pid()
		   AND (backend_type LIKE 'persist_sink%'
				OR (backend_type = 'client backend' AND datname = current_database()
					AND application_name <> 'sustained_sample'));
		PERFORM pg_sleep(0.02);
	END LOOP;
END
$$;
SELECT format('| %s | %s | %s | %s%% |', kind, what, count(*),
			  round(100.0 * count(*) / sum(count(*)) OVER (PARTITION BY kind), 1))
  FROM wait_samples
 GROUP BY kind, what
 ORDER BY kind, count(*) DESC;
