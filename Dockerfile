# swarmkv node image: the static swarmnode binary and nothing else.
#
# No base image is pulled: build the binary on the host first
# (CGO_ENABLED=0, `make build`), then `make image` (docker build -t swarmkv:dev .).
# The image has no shell, so the health check runs the binary itself:
# `swarmnode health --ready --http-addr 127.0.0.1:7102`.
FROM scratch
COPY bin/swarmnode /swarmnode
VOLUME ["/data"]
# 7100 gRPC (clients), 7101 Raft, 7102 HTTP (health, metrics, admin), 7103 gossip (TCP+UDP)
EXPOSE 7100 7101 7102 7103 7103/udp
ENTRYPOINT ["/swarmnode"]
CMD ["serve", "--data-dir", "/data", "--grpc-addr", "0.0.0.0:7100", "--raft-addr", "0.0.0.0:7101", "--http-addr", "0.0.0.0:7102", "--gossip-addr", "0.0.0.0:7103"]
