# autorecovery image: the daemon (`autorecovery run`), the admin shell and the reference bookie.
#   docker build -t autorecovery:dev .
# Stage 1 builds the wheel of our package alone. Stage 2 (a slim image, run as an unprivileged user,
# uid 10001 "bookkeeper") installs the locked runtime dependencies first (requirements/runtime.txt:
# every transitive version pinned with its hashes, installed with --require-hashes, `make lock`
# regenerates it) in a layer only a change of the lock rebuilds, then our wheel with --no-deps.
# grpcio-tools (protobuf code generation) is a dev dependency and not in the image.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY autorecovery ./autorecovery
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM python:3.11-slim
RUN groupadd --system --gid 10001 bookkeeper \
 && useradd --system --uid 10001 --gid bookkeeper --home-dir /var/lib/autorecovery --create-home \
      --shell /usr/sbin/nologin bookkeeper \
 && mkdir -p /etc/autorecovery /data \
 && chown bookkeeper:bookkeeper /data
# dependencies first: this layer is rebuilt only when the lock changes, never for a source change
COPY requirements/runtime.txt /tmp/runtime.txt
RUN pip install --no-cache-dir --require-hashes -r /tmp/runtime.txt \
 && rm /tmp/runtime.txt
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --no-deps /wheels/autorecovery-*.whl \
 && rm -rf /wheels
COPY deploy/bk_server.conf /etc/autorecovery/bk_server.conf
# bin/apply-config-from-env.py and bin/bookkeeper, relative to the working directory: the two commands the
# Apache Pulsar Helm chart's recovery pod runs (docs/deploy.md, deploy/helm/pulsar-values-autorecovery.yaml)
COPY --chmod=0755 deploy/pulsar/bin/ /var/lib/autorecovery/bin/
USER bookkeeper
WORKDIR /var/lib/autorecovery
# 3181: reference bookie (gRPC); 8080: admin HTTP (/metrics, /healthz, /readyz, /api/v1/...)
EXPOSE 3181 8080
ENV PYTHONUNBUFFERED=1
# The daemon's liveness endpoint (GET /healthz answers 200 while its event loop runs; docs/operators.md).
# No curl in the slim image: Python's urllib. The port follows BK_httpServerPort when it is set
# (bk_server.conf's default is 8080); a daemon with httpServerTlsEnable=true needs its own healthcheck.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('BK_httpServerPort', '8080'), timeout=4)"]
ENTRYPOINT ["autorecovery"]
CMD ["run", "-c", "/etc/autorecovery/bk_server.conf"]
