# The shardcache image: shardcache (node, control, dev, origin) and cachectl,
# static binaries on a distroless base, running as nonroot (uid 65532).
#   docker build -t ghcr.io/shardcache/shardcache:v0.1.0 .
FROM golang:1.26 AS build
WORKDIR /src
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/shardcache ./cmd/shardcache && \
    CGO_ENABLED=0 go build -trimpath -o /out/cachectl ./cmd/cachectl

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/shardcache /out/cachectl /usr/local/bin/
ENTRYPOINT ["/usr/local/bin/shardcache"]
