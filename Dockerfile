FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    LITELLM_LOCAL_MODEL_COST_MAP=True \
    CONTEXT_PROXY_HOST=0.0.0.0 \
    CONTEXT_PROXY_PORT=8080 \
    CONTEXT_PROXY_POLICIES=/app/policies \
    CONTEXT_PROXY_DB=/data/context-proxy.db

WORKDIR /app
COPY pyproject.toml README.md ./
COPY proxy ./proxy
COPY policies ./policies
RUN pip install --no-cache-dir . \
    && useradd --system --uid 10001 --home /app proxy \
    && mkdir -p /data && chown proxy /data

USER proxy
VOLUME ["/data"]
EXPOSE 8080
HEALTHCHECK --interval=15s --timeout=3s --start-period=10s --retries=3 \
    CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2).status == 200 else 1)"
CMD ["context-proxy", "serve"]
