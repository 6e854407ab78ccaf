# The shardcache image: shardcache (node, control, dev, origin) and cachectl,
# static binaries on a distroless base, running as nonroot (uid 65532).
#   docker build --build-arg VERSION=$(git describe --tags --always) -t ghcr.io/shardcache/shardcache:v0.1.0 .
FROM golang:1.26 AS build
ARG VERSION=
WORKDIR /src
COPY . .
RUN LDFLAGS="-X github.com/shardcache/shardcache/sdk/buildinfo.version=${VERSION}" && \
    CGO_ENABLED=0 go build -trimpath -ldflags "$LDFLAGS" -o /out/shardcache ./cmd/shardcache && \
    CGO_ENABLED=0 go build -trimpath -ldflags "$LDFLAGS" -o /out/cachectl ./cmd/cachectl

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/shardcache /out/cachectl /usr/local/bin/
ENTRYPOINT ["/usr/local/bin/shardcache"]
