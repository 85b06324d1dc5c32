#!/usr/bin/env bash
# Build a local Redis server image without any container registry.
#
# The image is assembled from the host's Debian package: /usr/bin/redis-server
# (and /usr/bin/redis-cli, handy for `docker exec` and health checks) plus
# every shared library and the dynamic loader that `ldd` lists for them, laid
# out at the same absolute paths in a `FROM scratch` image (see
# docker/Dockerfile.scratch). If `docker build` is unavailable (e.g. a client
# that insists on a missing buildx), the same root filesystem is loaded with
# `docker import` instead.
#
# Usage: docker/build-image.sh [--force] [--no-verify]
#   --force      rebuild even if the image already exists
#   --no-verify  skip the post-build smoke test (run + PING)
#
# Environment:
#   QUORUMLOCK_REDIS_IMAGE   image tag to build (default quorumlock-redis:local)
#   QUORUMLOCK_REDIS_SERVER  redis-server binary to package (default /usr/bin/redis-server)
#
# Idempotent: exits 0 without doing anything if the tag already exists
# (unless --force). Safe to run concurrently: a lock serialises builders.
set -euo pipefail

IMAGE="${QUORUMLOCK_REDIS_IMAGE:-quorumlock-redis:local}"
REDIS_SERVER="${QUORUMLOCK_REDIS_SERVER:-/usr/bin/redis-server}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
FORCE=0
VERIFY=1

for arg in "$@"; do
    case "$arg" in
        --force) FORCE=1 ;;
        --no-verify) VERIFY=0 ;;
        -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "build-image.sh: unknown argument: $arg" >&2; exit 2 ;;
    esac
done

log() { echo "build-image.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

command -v docker >/dev/null 2>&1 || die "the docker CLI is not installed"
docker info >/dev/null 2>&1 || die "cannot reach the Docker engine (is dockerd running? is DOCKER_HOST right?)"

# Serialise concurrent invocations (e.g. several test binaries starting at once).
if command -v flock >/dev/null 2>&1; then
    LOCK_FILE="${TMPDIR:-/tmp}/quorumlock-build-image.lock"
    exec 9>"$LOCK_FILE"
    flock 9
fi

if [[ $FORCE -eq 0 ]] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
    log "image $IMAGE already exists (use --force to rebuild)"
    exit 0
fi

# --- 1. make sure the redis-server binary is there -------------------------
if [[ ! -x "$REDIS_SERVER" ]]; then
    [[ "$REDIS_SERVER" == /usr/bin/redis-server ]] || die "$REDIS_SERVER not found"
    command -v apt-get >/dev/null 2>&1 || die "/usr/bin/redis-server missing and apt-get unavailable"
    SUDO=""
    if [[ $(id -u) -ne 0 ]]; then
        command -v sudo >/dev/null 2>&1 || die "/usr/bin/redis-server missing; install redis-server (needs root)"
        SUDO="sudo"
    fi
    log "installing redis-server with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    if ! $SUDO apt-get install -y --no-install-recommends redis-server >&2; then
        $SUDO apt-get update >&2
        $SUDO apt-get install -y --no-install-recommends redis-server >&2
    fi
    [[ -x "$REDIS_SERVER" ]] || die "apt-get did not provide $REDIS_SERVER"
fi
command -v ldd >/dev/null 2>&1 || die "ldd not found (package libc-bin)"

# --- 2. stage binaries + shared libraries + loader ------------------------
STAGE="$(mktemp -d "${TMPDIR:-/tmp}/quorumlock-redis-image.XXXXXX")"
trap 'rm -rf "$STAGE"' EXIT
ROOTFS="$STAGE/rootfs"
mkdir -p "$ROOTFS/usr/bin" "$ROOTFS/data" "$ROOTFS/tmp"
chmod 1777 "$ROOTFS/tmp"
chmod 0777 "$ROOTFS/data"   # lets the server run under any --user uid

# Copy a file (following symlinks) to the same absolute path inside ROOTFS.
stage_file() {
    local src="$1" dst="$ROOTFS$1"
    [[ -e "$dst" ]] && return 0
    mkdir -p "$(dirname "$dst")"
    cp -L "$src" "$dst"
}

# Stage every library and the loader that ldd lists for a binary.
stage_libs() {
    local bin="$1" line path
    local out
    out="$(ldd "$bin")" || die "ldd failed for $bin (not a dynamic ELF binary?)"
    while IFS= read -r line; do
        path=""
        if [[ "$line" =~ =\>\ (/[^ ]+)\ \( ]]; then
            path="${BASH_REMATCH[1]}"            # libfoo.so => /lib/.../libfoo.so (0x..)
        elif [[ "$line" =~ ^[[:space:]]*(/[^ ]+)\ \( ]]; then
            path="${BASH_REMATCH[1]}"            # /lib64/ld-linux-x86-64.so.2 (0x..)
        elif [[ "$line" =~ "not found" ]]; then
            die "ldd $bin: $line"
        fi
        [[ -n "$path" ]] && stage_file "$path"
    done <<<"$out"
}

# cp -L dereferences Debian's redis-server -> redis-check-rdb symlink; the
# binary picks its mode from argv[0], which is /usr/bin/redis-server here.
cp -L "$REDIS_SERVER" "$ROOTFS/usr/bin/redis-server"
stage_libs "$REDIS_SERVER"
if command -v redis-cli >/dev/null 2>&1; then
    cp -L "$(command -v redis-cli)" "$ROOTFS/usr/bin/redis-cli"
    stage_libs "$(command -v redis-cli)"
fi
REDIS_VERSION="$("$REDIS_SERVER" --version | sed -n 's/.* v=\([^ ]*\).*/\1/p')"
log "staged redis-server ${REDIS_VERSION:-?} with $(find "$ROOTFS" -type f | wc -l) files ($(du -sh "$ROOTFS" | cut -f1))"

# --- 3. build the image -----------------------------------------------------
cp "$HERE/Dockerfile.scratch" "$STAGE/Dockerfile"
if docker build --quiet --label "org.opencontainers.image.version=$REDIS_VERSION" \
        --label "quorumlock.redis-image=1" -t "$IMAGE" -f "$STAGE/Dockerfile" "$STAGE" >&2; then
    log "built $IMAGE with docker build"
else
    log "docker build failed; falling back to docker import"
    tar -C "$ROOTFS" -c . | docker import \
        --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' \
        --change 'WORKDIR /data' \
        --change 'EXPOSE 6379' \
        --change 'ENTRYPOINT ["/usr/bin/redis-server"]' \
        --change 'CMD ["--port", "6379", "--bind", "0.0.0.0", "--protected-mode", "no", "--dir", "/data"]' \
        --change "LABEL org.opencontainers.image.version=$REDIS_VERSION quorumlock.redis-image=1" \
        - "$IMAGE" >&2
    log "built $IMAGE with docker import"
fi

# --- 4. smoke test: the image starts and answers PING ----------------------
if [[ $VERIFY -eq 1 ]]; then
    CID="$(docker run -d --rm -p 127.0.0.1::6379 "$IMAGE" \
        --port 6379 --bind 0.0.0.0 --protected-mode no --save '' --appendonly no)"
    cleanup_ctr() { docker rm -f "$CID" >/dev/null 2>&1 || true; }
    PORT="$(docker port "$CID" 6379/tcp | sed -n 's/^127\.0\.0\.1:\([0-9]*\)$/\1/p' | head -n1)"
    ok=0
    for _ in $(seq 1 50); do
        if command -v redis-cli >/dev/null 2>&1; then
            reply="$(redis-cli -h 127.0.0.1 -p "$PORT" ping 2>/dev/null || true)"
        else
            reply="$( (exec 3<>"/dev/tcp/127.0.0.1/$PORT" && printf 'PING\r\n' >&3 && timeout 1 head -c 7 <&3) 2>/dev/null | tr -d '\r\n+' || true)"
        fi
        if [[ "$reply" == PONG ]]; then ok=1; break; fi
        sleep 0.1
    done
    if [[ $ok -ne 1 ]]; then
        docker logs "$CID" >&2 || true
        cleanup_ctr
        docker image rm -f "$IMAGE" >/dev/null 2>&1 || true
        die "smoke test failed: $IMAGE did not answer PING on 127.0.0.1:$PORT (image removed)"
    fi
    cleanup_ctr
    log "smoke test passed: PING -> PONG on 127.0.0.1:$PORT"
fi

docker image ls "$IMAGE" >&2
