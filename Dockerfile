# Multi-stage build: a static ragtail binary on a distroless base (about 20 MB).
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/ragtail ./cmd/ragtail

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ragtail /usr/local/bin/ragtail
# 8080: API, 9464: admin (/metrics, /debug/*), 8000: llm-sim
EXPOSE 8080 9464 8000
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/ragtail"]
CMD ["serve", "--addr", ":8080"]
