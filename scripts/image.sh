#!/usr/bin/env bash
# `./dev image`: the container image, built with Debian's buildah from scratch
# (no base image: no registry is pulled from), holding
#
#   /usr/local/bin/sonde                 the release binary (dashboard and bundled plugins inside)
#   the shared libraries it links        from this machine's Debian packages (glibc, libgcc),
#                                        with /etc/ld.so.cache made for them and each
#                                        package's copyright file
#   /etc/ssl/certs/ca-certificates.crt   Debian's ca-certificates (TLS export to a public collector)
#   /etc/passwd, /etc/group              root and nobody/nogroup (65534), nothing else
#   /var/lib/sonde, /var/lib/sonde-sinks the data and sinks directories, owned by 65534
#
# and nothing else: no shell, no package manager. It runs as 65534:65534 and
# needs no capability (sampling reads world-readable files; docs/deploy.md).
# The packages and versions it was made of are in its label
# `sonde.debian-packages` and in /usr/share/doc/sonde-image/packages.
#
# Writes the image into the local containers storage as localhost/sonde:<version>
# (podman sees it there) and an OCI archive with gzip layers beside it,
# target/image/sonde-<version>-<arch>.oci.tar, which is what a registry would
# store: the script fails when that archive is over IMAGE_MAX_MB (60) MB.
#
# IMAGE_SONDE_BIN packs another binary, IMAGE_TAG names the image otherwise,
# IMAGE_ARCHIVE=0 skips the archive and the size limit (tests/tests/container.rs
# builds the debug binary's image this way).
#
# Reproducible as far as buildah 1.28 allows: files sorted, time stamps and
# the image's creation time the last commit's.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
fail() { echo "image: $*" >&2; exit 1; }

command -v buildah >/dev/null || fail "buildah is missing: \`./dev container-tools\` installs Debian's"
# Files owned by 65534 in the layer need root, or a user namespace where this
# user is root.
if [ "$(id -u)" != 0 ] && [ -z "${_IMAGE_UNSHARED:-}" ]; then
    exec env _IMAGE_UNSHARED=1 buildah unshare bash "${BASH_SOURCE[0]}" "$@"
fi

bin="${IMAGE_SONDE_BIN:-$root/target/release/sonde}"
[ -x "$bin" ] || fail "$bin is missing: run \`cargo build --release -p sonde\` (./dev image does)"
version="$("$bin" --version | awk '{ print $2 }')"
[ -n "$version" ] || fail "$bin --version printed no version"
arch="$(uname -m)"
tag="${IMAGE_TAG:-localhost/sonde:$version}"
out="$root/target/image"
max_mb="${IMAGE_MAX_MB:-60}"
epoch="$(git -C "$root" log -1 --format=%ct 2>/dev/null || echo 0)"

work="$(mktemp -d)"
ctr=""
cleanup() {
    [ -z "$ctr" ] || buildah rm "$ctr" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

# --- the root file system
rootfs="$work/rootfs"
mkdir -p "$rootfs"/{usr/local/bin,etc/ssl/certs,tmp,var/lib/sonde,var/lib/sonde-sinks,usr/share/doc/sonde-image}
install -m 0755 "$bin" "$rootfs/usr/local/bin/sonde"

# The libraries the dynamic loader resolves for the binary here, at the paths
# it found them, and the loader itself at the path the binary names.
libs="$(ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | sort -u)"
[ -n "$libs" ] || fail "ldd found no libraries for $bin (a static binary needs none: drop this step)"
packages=""
for lib in $libs; do
    mkdir -p "$rootfs$(dirname "$lib")"
    cp -L "$lib" "$rootfs$lib"
    # dpkg knows the file by its real path (merged /usr: /lib is a link to usr/lib).
    owner="$(dpkg-query -S "$(readlink -f "$lib")" 2>/dev/null || dpkg-query -S "$lib" 2>/dev/null)" \
        || fail "$lib belongs to no Debian package: the image is made of Debian packages only"
    packages="$packages ${owner%%:*}"
done
packages="$packages ca-certificates"
cp -L /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/" \
    || fail "/etc/ssl/certs/ca-certificates.crt is missing: apt-get install ca-certificates"

packages="$(printf '%s\n' $packages | sed 's/:.*//' | sort -u)"
listed=""
for p in $packages; do
    v="$(dpkg-query -W -f '${Version}' "$p")" || fail "package $p is not installed"
    listed="$listed$p=$v "
    # Their licences travel with them (glibc's LGPL among them).
    [ -f "/usr/share/doc/$p/copyright" ] || fail "/usr/share/doc/$p/copyright is missing: the image would carry $p without its licence"
    mkdir -p "$rootfs/usr/share/doc/$p"
    cp "/usr/share/doc/$p/copyright" "$rootfs/usr/share/doc/$p/"
done
listed="${listed% }"
printf '%s\n' $listed >"$rootfs/usr/share/doc/sonde-image/packages"
install -m 0644 "$root/LICENSE" "$rootfs/usr/share/doc/sonde-image/LICENSE"

# The loader's search list and cache, as a Debian system has them (the NVIDIA
# container toolkit adds libnvidia-ml.so.1 and runs ldconfig again).
multiarch="$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo "$arch-linux-gnu")"
mkdir -p "$rootfs/lib/$multiarch" "$rootfs/usr/lib/$multiarch"
printf '%s\n' "/lib/$multiarch" "/usr/lib/$multiarch" >"$rootfs/etc/ld.so.conf"
/sbin/ldconfig -r "$rootfs"

printf 'root:x:0:0:root:/root:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n' >"$rootfs/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$rootfs/etc/group"

chmod 1777 "$rootfs/tmp"
chown 65534:65534 "$rootfs/var/lib/sonde" "$rootfs/var/lib/sonde-sinks"
chmod 0750 "$rootfs/var/lib/sonde" "$rootfs/var/lib/sonde-sinks"

# One layer: sorted, owners numeric, every time stamp the last commit's.
tar -C "$rootfs" --sort=name --numeric-owner --mtime="@$epoch" -cf "$work/rootfs.tar" .

# --- the image
ctr="$(buildah from scratch)"
buildah add "$ctr" "$work/rootfs.tar" / >/dev/null
license="$(sed -n 's/^license = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -1)"
buildah config \
    --entrypoint '["/usr/local/bin/sonde"]' \
    --user 65534:65534 \
    --workingdir /var/lib/sonde \
    --env SONDE_HOST__DATA_DIR=/var/lib/sonde \
    --env SONDE_SINKS__DIR=/var/lib/sonde-sinks \
    --port 7878/tcp --port 4317/tcp --port 4318/tcp \
    --label org.opencontainers.image.title=sonde \
    --label org.opencontainers.image.version="$version" \
    --label org.opencontainers.image.licenses="$license" \
    --label org.opencontainers.image.revision="$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)" \
    --label sonde.debian-packages="$listed" \
    "$ctr"
buildah commit --quiet --format oci --timestamp "$epoch" --rm "$ctr" "$tag" >"$work/id"
ctr=""
echo "image: $tag $(cut -c1-19 "$work/id") ($listed)"

# --- the archive a registry would hold, and its size
if [ "${IMAGE_ARCHIVE:-1}" != 0 ]; then
    mkdir -p "$out"
    archive="$out/sonde-$version-$arch.oci.tar"
    rm -f "$archive"
    buildah push --quiet "$tag" "oci-archive:$archive:$tag" >/dev/null
    bytes="$(wc -c <"$archive" | tr -d ' ')"
    # What a pull transfers: the manifest's layers, which must be compressed.
    layers="$(python3 - "$archive" <<'PY'
import json, sys, tarfile
t = tarfile.open(sys.argv[1])
blob = lambda d: json.load(t.extractfile("blobs/sha256/" + d.split(":", 1)[1]))
manifest = blob(json.load(t.extractfile("index.json"))["manifests"][0]["digest"])
kinds = {l["mediaType"] for l in manifest["layers"]}
if kinds != {"application/vnd.oci.image.layer.v1.tar+gzip"}:
    sys.exit(f"image: the archive's layers are {sorted(kinds)}, not gzip")
print(sum(l["size"] for l in manifest["layers"]))
PY
)"
    printf '%s  %s bytes, layers %s bytes gzip (%s MB); the binary %s bytes\n' "$archive" "$bytes" "$layers" \
        "$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1e6 }')" "$(wc -c <"$bin" | tr -d ' ')"
    [ "$bytes" -le $((max_mb * 1000 * 1000)) ] || fail "the image is $bytes bytes compressed, over ${max_mb} MB"
fi
