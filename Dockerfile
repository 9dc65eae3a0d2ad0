# contextd: the context-engine sidecar. One port (7420) serves gRPC, gRPC-Web, Connect and /metrics.
#   docker build -t contextd .
#   docker run --rm -p 7420:7420 -e CONTEXTD_REDIS_URL=redis://redis:6379 contextd

FROM node:24-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json ./
COPY gen/ts ./gen/ts
COPY src ./src
COPY inspector ./inspector
RUN npx tsc -p tsconfig.json \
 && npx vite build --config inspector/vite.config.ts \
 && npm prune --omit=dev --no-audit --no-fund

FROM node:24-bookworm-slim
ENV NODE_ENV=production \
    CONTEXTD_HOST=0.0.0.0 \
    CONTEXTD_PORT=7420
WORKDIR /app
COPY --from=build /app/package.json ./
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
# The image's "node" user (uid 1000); nothing in /app is writable by it.
USER node
EXPOSE 7420
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 CMD ["node", "dist/src/healthcheck.js"]
# The probe reads the server's flags from PID 1's command line (docker run contextd --port 8000 …)
# and speaks HTTPS when --tls-cert is set; with --tls-client-ca give it a client certificate in
# CONTEXTD_HEALTHCHECK_CERT / CONTEXTD_HEALTHCHECK_KEY (docs/operations.md).
# node is PID 1: contextd handles SIGTERM/SIGINT itself (graceful shutdown, exit 0). Its only child
# processes are the --workers N workers, which it forks, waits for and reaps itself on shutdown;
# nothing else is spawned, so there are no orphans for an init to reap. Stop with a timeout above
# --shutdown-grace-ms (default 10 s), e.g. `docker stop -t 15`.
ENTRYPOINT ["node", "dist/src/main.js"]
