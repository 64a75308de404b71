"""Running fairctl's stack: throwaway Redis and Prometheus servers, the native supervisor behind
``fairctl stack``, the webhook receiver, and the compose and Kubernetes files generated from the
config."""
