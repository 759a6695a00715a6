# syntax=docker/dockerfile:1
# The chime image (SPEC §16): one static `chime` binary plus chime.wasm at
# /usr/share/chime/chime.wasm. The two `go build` lines must stay the same
# as the Makefile's `build` and `wasm` targets (deploy/deploy_test.go checks).

FROM golang:1.26 AS build
WORKDIR /src
ENV CGO_ENABLED=0
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=devel
RUN go build -trimpath -ldflags "-X main.version=${VERSION}" -o /out/chime ./cmd/chime
RUN GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -o /out/chime.wasm ./plugin
# The state directory, created here because the final stage has no shell.
RUN mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/chime /usr/local/bin/chime
COPY --from=build /out/chime.wasm /usr/share/chime/chime.wasm
COPY --from=build --chown=65532:65532 /out/data /var/lib/chime
USER 65532:65532
ENV CHIME_DATA_DIR=/var/lib/chime
EXPOSE 8787 8788
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
  CMD ["/usr/local/bin/chime", "healthcheck", "http://127.0.0.1:8787/healthz"]
ENTRYPOINT ["/usr/local/bin/chime"]
CMD ["host", "--addr", "0.0.0.0:8787"]
