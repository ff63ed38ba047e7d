# syntax=docker/dockerfile:1
# Build:  docker build -t sluice:0.1.0 .
# Needs BuildKit (the default builder since Docker 23) for the cache mounts.

FROM rust:1-bookworm AS builder
WORKDIR /src
COPY . .
# The cache mounts keep the crate registry and target/ between builds; target/ is a cache mount,
# so the binary is copied out in the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p sluice \
 && cp target/release/sluice /sluice

# glibc and libgcc from Debian 12, matching the builder; no shell, no package manager.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=builder /sluice /sluice
USER 65532:65532
EXPOSE 8080 9000
ENTRYPOINT ["/sluice"]
CMD ["serve", "--kubernetes"]
