# The context-proxy image. Build from the repository root:
#   docker build -t context-proxy .
# The rest of the operator kit (compose, Prometheus, alerts, dashboard) is in deploy/.
# Pinned: the base image by its exact tag, every Python dependency by deploy/requirements.txt.
FROM python:3.11.7-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    LITELLM_LOCAL_MODEL_COST_MAP=True \
    CONTEXT_PROXY_HOST=0.0.0.0 \
    CONTEXT_PROXY_PORT=8080 \
    CONTEXT_PROXY_POLICIES=/app/policies \
    CONTEXT_PROXY_DB=/data/context-proxy.db \
    CONTEXT_PROXY_SHUTDOWN_GRACE_S=8

WORKDIR /app
# The dependency layer first: a code change rebuilds only the layers below it.
COPY deploy/requirements.txt /tmp/requirements.txt
RUN pip install --no-cache-dir -r /tmp/requirements.txt \
    && useradd --system --uid 10001 --home /app proxy \
    && mkdir -p /data && chown proxy /data

COPY pyproject.toml README.md ./
COPY proxy ./proxy
COPY policies ./policies
RUN pip install --no-cache-dir --no-deps .

USER proxy
VOLUME ["/data"]
EXPOSE 8080
# The port the proxy listens on is whatever CONTEXT_PROXY_PORT says at run time.
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
    CMD python -c "import os, sys, urllib.request; port = os.environ.get('CONTEXT_PROXY_PORT', '8080'); sys.exit(0 if urllib.request.urlopen(f'http://127.0.0.1:{port}/healthz', timeout=2).status == 200 else 1)"
# docker stop waits 10 s before SIGKILL: the proxy's shutdown grace (8 s) ends inside it.
STOPSIGNAL SIGTERM
CMD ["context-proxy", "serve"]
