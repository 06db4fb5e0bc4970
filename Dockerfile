# autorecovery image: the daemon (`autorecovery run`), the admin shell and the reference bookie.
#   docker build -t autorecovery:dev .
# Stage 1 builds a wheel of the project and of every pinned dependency; stage 2 installs only those
# wheels into a slim image and runs as an unprivileged user (uid 10001, "bookkeeper").
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY autorecovery ./autorecovery
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
RUN groupadd --system --gid 10001 bookkeeper \
 && useradd --system --uid 10001 --gid bookkeeper --home-dir /var/lib/autorecovery --create-home \
      --shell /usr/sbin/nologin bookkeeper \
 && mkdir -p /etc/autorecovery /data \
 && chown bookkeeper:bookkeeper /data
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels autorecovery \
 && rm -rf /wheels
COPY deploy/bk_server.conf /etc/autorecovery/bk_server.conf
USER bookkeeper
WORKDIR /var/lib/autorecovery
# 3181: reference bookie (gRPC); 8080: admin HTTP (/metrics, /readyz, /api/v1/...)
EXPOSE 3181 8080
ENV PYTHONUNBUFFERED=1
ENTRYPOINT ["autorecovery"]
CMD ["run", "-c", "/etc/autorecovery/bk_server.conf"]
