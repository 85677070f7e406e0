# Sourced by provision-uml.sh and provision-uml-psi.sh: Debian packages from the unstable suite, unpacked, not
# installed.
#
# unstable_update APT_DIR: APT_DIR set up as apt's own lists and cache for the machine's own Debian mirror with the
# suite set to unstable (tests/uml/debian_source.py writes that source), and its lists updated. The machine's apt
# configuration and installed packages are left as they are. Needs HERE (the tests/uml folder).
unstable_update() {
	mkdir -p "$1/etc" "$1/lists/partial" "$1/cache/archives/partial"
	# The machine's own Debian stanza (not the security one), with the suite changed.
	python3 "$HERE/debian_source.py" /etc/apt/sources.list.d/debian.sources unstable > "$1/etc/unstable.sources"
	# shellcheck disable=SC2046
	apt-get $(unstable_opts "$1") update -qq
}

# unstable_opts APT_DIR: apt's options for APT_DIR, one a line.
unstable_opts() {
	printf '%s\n' -o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$1/etc" -o "Dir::State::Lists=$1/lists" \
		-o "Dir::Cache=$1/cache" -o APT::Get::List-Cleanup=0 -o APT::Sandbox::User=root
}

# unstable_unpack APT_DIR INTO PACKAGE...: downloads each PACKAGE (a name, or name=version) from unstable (after
# unstable_update APT_DIR) and unpacks every downloaded .deb into INTO with `dpkg -x`.
unstable_unpack() {
	unstable_apt=$1; unstable_into=$2; shift 2
	mkdir -p "$unstable_into"
	rm -f "$unstable_apt"/cache/*.deb
	# shellcheck disable=SC2046
	(cd "$unstable_apt/cache" && apt-get $(unstable_opts "$unstable_apt") download "$@" >/dev/null)
	for deb in "$unstable_apt"/cache/*.deb; do dpkg -x "$deb" "$unstable_into"; done
}

# unstable_depends APT_DIR PACKAGE: the first package PACKAGE depends on in unstable (after unstable_update
# APT_DIR), e.g. linux-source -> linux-source-7.2.
unstable_depends() {
	# shellcheck disable=SC2046
	apt-cache $(unstable_opts "$1") depends "$2" | sed -n 's/^ *Depends: *\([^ <]*\).*/\1/p' | head -n 1
}
