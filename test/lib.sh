# Shared steps of test/run, test/demo and the benchmarks: packages, build,
# install, and running as an ordinary user when started as root.

PG_MAJOR=15
# PG_CONFIG may name another installation's pg_config (a private copy, say)
PG_BINDIR=/usr/lib/postgresql/$PG_MAJOR/bin
if [ -n "${PG_CONFIG:-}" ] && [ -x "$PG_CONFIG" ]; then
	PG_BINDIR=$("$PG_CONFIG" --bindir)
fi
PACKAGES="postgresql-$PG_MAJOR postgresql-server-dev-$PG_MAJOR libzstd-dev libcurl4-openssl-dev libipc-run-perl make gcc rsync"
# A throwaway S3 store for the object store tests (test/s3/objstore)
OBJECT_STORE_PACKAGES="ceph-mon ceph-osd radosgw ceph-common curl"
WARNING_FLAGS="-Wall -Wextra -Werror -Wno-unused-parameter -Wno-missing-field-initializers -Wno-sign-compare -DUSE_ASSERT_CHECKING"
export PATH="$PG_BINDIR:$PATH"

# Installs the Debian packages the build and tests need (as root; apt-get update first).
install_packages() {
	local missing="" p
	for p in $PACKAGES "$@"; do
		dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
	done
	[ -z "$missing" ] && return 0
	if [ "$(id -u)" != 0 ]; then
		echo "missing packages:$missing (run as root, or install them)" >&2
		return 1
	fi
	apt-get -o DPkg::Lock::Timeout=600 update -qq
	DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq $missing >/dev/null
}

# Builds warning-free with assertions (or with BUILD_CFLAGS, if set) and
# installs into the server's directories.
build_and_install() {
	make -s clean
	make -s PG_CFLAGS="${BUILD_CFLAGS:-$WARNING_FLAGS}"
	if [ -w "$($PG_BINDIR/pg_config --pkglibdir)" ]; then
		make -s install
	else
		sudo -n make -s install
	fi
}

# Copies the tree to a fresh directory owned by postgres and prints its path.
copy_for_postgres() {
	local dir
	dir=$(mktemp -d /tmp/persist_sink.XXXXXX)
	rsync -a --exclude .git ./ "$dir/"
	chown -R postgres:postgres "$dir"
	echo "$dir"
}
