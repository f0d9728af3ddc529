# syntax=docker/dockerfile:1
# The syntax line pins the BuildKit frontend so the cache mount below works with any recent
# Docker (BuildKit is the default builder since Docker 23).
#
# Build:  docker build --build-arg VERSION=$(git describe --tags --always --dirty) -t erpsync .
# Run:    docker run --rm erpsync version

# GO_VERSION is declared before the first FROM so it can be used in FROM. The official golang
# images set GOTOOLCHAIN=local, so the image must be at least the `go` line of go.mod (1.26.8):
# the floating 1.26 tag follows the newest 1.26.x patch release. Pin a patch release
# (--build-arg GO_VERSION=1.26.8) for a reproducible build.
ARG GO_VERSION=1.26

# ---------------------------------------------------------------------------------------------
# Stage 1: build a static binary.
# bookworm rather than alpine: the same Debian release as the distroless base below, and glibc
# tooling that behaves like a developer's machine; nothing from this stage reaches the image.
FROM golang:${GO_VERSION}-bookworm AS build

WORKDIR /src

# Modules first, in their own layer: it is only rebuilt when go.mod or go.sum change, not on
# every source edit.
COPY go.mod go.sum ./
RUN go mod download && go mod verify

COPY . .

ARG VERSION=dev
# CGO_ENABLED=0: a fully static binary (pure-Go pgx and net resolver), so it runs on the
# libc-less distroless/static base.
# -trimpath: no build-machine paths in the binary or in panic traces; makes builds reproducible.
# -s -w: drop the symbol table and DWARF (smaller image; stack traces keep function names).
# -X ...Version: the version `erpsync version` prints and the logs carry.
# The cache mount keeps Go's build cache between `docker build`s without baking it into a layer.
RUN --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/erpsync/erpsync/internal/buildinfo.Version=${VERSION}" \
      -o /out/erpsync ./cmd/erpsync

# ---------------------------------------------------------------------------------------------
# Stage 2: the runtime image.
# distroless/static: no shell, no package manager, no libc, only CA certificates (erpsync talks
# HTTPS to the ERP and may use TLS to Postgres), /etc/passwd entries and tzdata (CRON_TZ in
# schedules needs the zoneinfo database). The :nonroot variant runs as uid/gid 65532.
FROM gcr.io/distroless/static-debian12:nonroot

ARG VERSION=dev
LABEL org.opencontainers.image.title="erpsync" \
      org.opencontainers.image.description="Mirrors an ERP's HTTP API into Postgres" \
      org.opencontainers.image.source="https://github.com/erpsync/erpsync" \
      org.opencontainers.image.version="${VERSION}"

# /usr/local/bin: the same path the systemd unit uses, so docs and tooling agree.
# Owned by root and not writable by the runtime user: the process cannot replace its own binary.
COPY --from=build /out/erpsync /usr/local/bin/erpsync

# Numeric uid:gid (the base image already defaults to it): Kubernetes' runAsNonRoot can only
# verify a numeric user, and it matches runAsUser in deploy/kubernetes/deployment.yaml.
USER 65532:65532

# /healthz, /readyz and /metrics (ERPSYNC_HTTP_ADDR, default :8080). Documentation only;
# publishing is up to the runtime.
EXPOSE 8080

# No HEALTHCHECK: the image has no shell or curl to run one. Orchestrators probe /healthz and
# /readyz over HTTP instead (see docker-compose.yml and deploy/kubernetes/).

# Exec form, so erpsync is PID 1 and receives SIGTERM directly for its graceful shutdown
# (ERPSYNC_SHUTDOWN_TIMEOUT, 25s by default: give `docker stop` a longer timeout, e.g. -t 30).
ENTRYPOINT ["/usr/local/bin/erpsync"]
# The daemon by default; `docker run IMAGE migrate|check|status|version` runs the others (the
# deployment examples run `migrate` separately, as the schema's owner).
CMD ["run"]
