# shellcheck shell=bash
# `scripts/build_images.sh --local` (`make images`): build the CPU, GPU and training images on this machine with
# podman, from the same Dockerfiles a registry build uses, changed only through their build arguments:
#   BASE_IMAGE=localhost/factprobe-base:bookworm  a Debian bookworm root file system (Python 3.11), made once
#                                                 with debootstrap and imported (no registry to pull from);
#   PYTHON=python3                                the GPU and training images' interpreter on that base;
#   TORCH_FIND_LINKS=/opt/torch-wheels            the folder pip's configuration names as find-links, mounted
#                                                 read-only, holding torch-<pin>+cpu: torch is installed from it
#                                                 alone (no CUDA torch is ever pulled) and its dependencies from
#                                                 TORCH_INDEX_URL=https://pypi.org/simple; without such a folder,
#                                                 torch from TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu.
# The host's CA bundle is mounted read-only and given to pip as its `cert` (a pip.conf mounted at
# /etc/xdg/pip), so pip reaches the package index from inside the build; neither mount enters a layer.
# The GPU and training images built so carry CPU torch: they check that the Python layer installs and
# imports; the CUDA bases stay for the cluster (containers/README.md, "Local builds").
#
# Each image is tagged localhost/factprobe-<kind>:<version>-<digest>, <digest> being 12 hex digits of the
# SHA-256 of its Dockerfile, of every file the build context holds (the .dockerignore allow-list) and of the
# build arguments, and labelled io.factprobe.source-digest=<the full digest>: a tag that exists is an image of
# exactly these sources, so it is not built again (`podman rmi` it to force a build). `--dry-run` prints the
# build commands and the tags without podman. Sourced by scripts/build_images.sh
# (which defines root, dry, die and run).

LOCAL_BASE="localhost/factprobe-base:bookworm"
LOCAL_TOOLS=(podman runc debootstrap)
LOCAL_INSTALL="apt-get install -y --no-install-recommends ${LOCAL_TOOLS[*]}"
DEBOOTSTRAP_INCLUDE="python3,python3-venv,python3-pip,ca-certificates,passwd"  # passwd: useradd/groupadd
WHEELS_MOUNT="/opt/torch-wheels"
LOCAL_PIPCONF=""  # pip.conf + CA bundle, mounted at /etc/xdg/pip during the builds (pip_config_dir)
CPU_TORCH_INDEX="https://download.pytorch.org/whl/cpu"
PYPI_INDEX="https://pypi.org/simple"

# One line and exit 2 unless podman, runc and debootstrap are installed and we are root.
local_preflight() {
  local missing=() t
  for t in "${LOCAL_TOOLS[@]}"; do command -v "$t" >/dev/null 2>&1 || missing+=("$t"); done
  if [[ ${#missing[@]} -gt 0 ]]; then
    die "${missing[*]} not installed: install as root with \`$LOCAL_INSTALL\` (Debian/Ubuntu), then run \`make images\` again"
  fi
  if [[ "$(id -u)" != 0 ]]; then
    die "local image builds run podman (runc) and debootstrap as root: run \`sudo make images\` (or this script as root)"
  fi
}

# The SHA-256 over a Dockerfile, every file of the build context (.dockerignore's `!` allow-list, less what it
# excludes inside: __pycache__, *.pyc/pyo/pyd, .pytest_cache, *.egg-info) and the build arguments.
context_digest() {
  local dockerfile="$1" build_args="$2" allowed
  mapfile -t allowed < <(sed -n 's:^!\(.*\)$:\1:p' "$root/.dockerignore" | sed 's:/*$::')
  {
    (cd "$root" && find "${allowed[@]}" -type f ! -path '*/__pycache__/*' ! -name '*.py[cod]' \
      ! -path '*/.pytest_cache/*' ! -path '*.egg-info/*' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
    sha256sum < "$dockerfile"
    echo "$build_args"
  } | sha256sum | cut -c1-64
}

# The first folder that pip's configuration (`pip config list`, PIP_FIND_LINKS) names as find-links and that
# holds the CPU wheel of torch at constraints.txt's pin for the base's Python (3.11); nothing if none does.
torch_wheels_dir() {
  local pin="$1" dirs d from_config=0
  dirs="${PIP_FIND_LINKS:-}"  # the environment first: it overrides pip's files (and asking pip takes a second)
  while :; do
    for d in $dirs; do
      d="${d#file://}"
      if compgen -G "$d/torch-$pin+cpu-cp311-*.whl" >/dev/null; then echo "$d"; return; fi
    done
    [[ $from_config -eq 0 ]] || return 0
    from_config=1
    dirs="$({ python3 -m pip config list 2>/dev/null || true; } | sed -n "s/^[^=]*find-links='\(.*\)'$/\1/p")"
  done
}

# Debian bookworm (minbase, Python 3.11) imported as LOCAL_BASE, unless it exists already.
ensure_local_base() {
  if [[ $dry -eq 1 ]]; then
    echo "# if $LOCAL_BASE is missing:"  # a dry run asks podman nothing (it may wait for a running build)
  elif "${podman[@]}" image exists "$LOCAL_BASE"; then
    echo "# $LOCAL_BASE exists (delete it with podman rmi to make it anew)"
    return
  fi
  local rootfs=/var/tmp/factprobe-base-rootfs
  run rm -rf "$rootfs"
  run debootstrap --variant=minbase "--include=$DEBOOTSTRAP_INCLUDE" bookworm "$rootfs" http://deb.debian.org/debian
  run rm -rf "$rootfs/var/cache/apt/archives" "$rootfs/var/lib/apt/lists"
  run mkdir -p "$rootfs/var/cache/apt/archives/partial" "$rootfs/var/lib/apt/lists/partial"
  echo "+ tar -C $rootfs -c . | ${podman[*]} import - $LOCAL_BASE"
  if [[ $dry -eq 0 ]]; then tar -C "$rootfs" -c . | "${podman[@]}" import - "$LOCAL_BASE" >/dev/null; fi
  run rm -rf "$rootfs"
}

# pip's cert for the builds: a pip.conf naming a copy of the host's CA bundle, in a folder of this run's own
# (mounted read-only at /etc/xdg/pip, where pip reads its site-wide configuration), removed on exit.
pip_config_dir() {
  [[ -z "$LOCAL_PIPCONF" ]] || return 0
  if [[ $dry -eq 1 ]]; then LOCAL_PIPCONF="/var/tmp/factprobe-build-pip.XXXXXX"; return; fi
  local ca="${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}"
  [[ -f "$ca" ]] || die "no CA bundle at $ca (set PIP_CERT to the bundle pip should trust)"
  LOCAL_PIPCONF="$(mktemp -d /var/tmp/factprobe-build-pip.XXXXXX)"
  trap 'rm -rf "$LOCAL_PIPCONF"' EXIT
  cp "$ca" "$LOCAL_PIPCONF/ca.crt"
  printf '[global]\ncert = /etc/xdg/pip/ca.crt\n' > "$LOCAL_PIPCONF/pip.conf"
  chmod -R a+rX "$LOCAL_PIPCONF"
}

# The image's torch must be the CPU build at the pin, and no CUDA wheel (nvidia-*) may be installed.
check_cpu_torch() {
  local ref="$1" pin="$2"
  "${podman[@]}" image exists "$ref" || die "podman build left no image $ref"
  "${podman[@]}" run --rm --pull=never --network none "$ref" python -c "
import importlib.metadata as m, sys, torch
cuda = sorted(d.metadata['Name'] for d in m.distributions() if d.metadata['Name'].lower().startswith('nvidia'))
print('$ref: torch', torch.__version__, 'cuda', torch.version.cuda, 'CUDA wheels', cuda)
sys.exit(0 if torch.__version__ == '$pin+cpu' and torch.version.cuda is None and not cuda else 1)" \
    || die "$ref: torch is not the CPU build $pin+cpu, or CUDA wheels are installed (the line above)"
}

# The other tags of localhost/factprobe-<kind> (images of earlier sources) go; the build cache stays (the deps
# stage is tagged localhost/factprobe-cache:<kind>-deps).
remove_superseded() {
  local kind="$1" ref="$2" old
  for old in $("${podman[@]}" images --noheading --format '{{.Repository}}:{{.Tag}}' "localhost/factprobe-$kind"); do
    if [[ "$old" != "$ref" ]]; then run "${podman[@]}" rmi "$old" >/dev/null; fi
  done
}

build_local() {
  local images="$1" kind wanted=() exports=() summary=() version pin wheels digest ref
  [[ $dry -eq 1 ]] || local_preflight
  IFS=',' read -r -a wanted <<< "$images"
  for kind in "${wanted[@]}"; do
    case "$kind" in cpu|gpu|train) ;; *) die "--local builds cpu, gpu and/or train, got '$kind'" ;; esac
  done
  version="$(sed -n 's/^version *= *"\(.*\)"/\1/p' "$root/pyproject.toml" | head -1)"
  pin="$(sed -n 's/^torch==//p' "$root/constraints.txt" | head -1)"
  [[ -n "$version" && -n "$pin" ]] || die "no version in pyproject.toml or no torch== pin in constraints.txt"

  export CONTAINERS_CONF="$root/containers/podman/containers.conf"  # default_ulimits = [], runtime runc
  podman=(podman --runtime runc)
  echo "+ export CONTAINERS_CONF=$CONTAINERS_CONF"
  ensure_local_base

  wheels="$(torch_wheels_dir "$pin")"
  local torch_args=(--build-arg "TORCH_INDEX_URL=$CPU_TORCH_INDEX")
  if [[ -n "$wheels" ]]; then
    # torch from the wheel alone; its dependencies (and nothing else: torch is installed) from PyPI
    torch_args=(-v "$wheels:$WHEELS_MOUNT:ro" --build-arg "TORCH_FIND_LINKS=$WHEELS_MOUNT" --build-arg "TORCH_INDEX_URL=$PYPI_INDEX")
  else
    echo "# no find-links folder of pip's holds torch-$pin+cpu-cp311: torch comes from $CPU_TORCH_INDEX"
  fi

  for kind in "${wanted[@]}"; do
    local dockerfile="$root/containers/Dockerfile.$kind" started=$SECONDS args size
    args=(--network host --pull=never -f "$dockerfile" --build-arg "BASE_IMAGE=$LOCAL_BASE" "${torch_args[@]}")
    if [[ "$kind" != cpu ]]; then args+=(--build-arg PYTHON=python3); fi
    digest="$(context_digest "$dockerfile" "${args[*]} $DEBOOTSTRAP_INCLUDE")"
    ref="localhost/factprobe-$kind:$version-${digest:0:12}"
    exports+=("export FACTPROBE_IMAGE_${kind^^}=$ref")
    if [[ $dry -eq 0 ]] && "${podman[@]}" image exists "$ref"; then
      echo "# $ref is up to date (its tag is the digest of these sources and build arguments): not rebuilt"
      continue
    fi
    pip_config_dir
    args+=(-v "$LOCAL_PIPCONF:/etc/xdg/pip:ro")
    # The deps stage first, under a tag of its own: a tagged image is never dangling, so `podman image prune`
    # keeps the dependency layers (the build cache) and a source change rebuilds only the small layers.
    run "${podman[@]}" build "${args[@]}" --target deps -t "localhost/factprobe-cache:$kind-deps" "$root"
    run "${podman[@]}" build "${args[@]}" -t "$ref" --label "io.factprobe.source-digest=$digest" "$root"
    if [[ $dry -eq 0 ]]; then
      check_cpu_torch "$ref" "$pin"
      size="$("${podman[@]}" image inspect --format '{{.Size}}' "$ref")"
      summary+=("$ref: $((size / 1000000)) MB, built in $((SECONDS - started)) s")
      remove_superseded "$kind" "$ref"
    fi
  done
  echo
  if [[ ${#summary[@]} -gt 0 ]]; then printf '# %s\n' "${summary[@]}"; fi
  echo "# use these images when compiling (and in the rehearsal):"
  printf '%s\n' "${exports[@]}"
}
