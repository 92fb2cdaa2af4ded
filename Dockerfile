# syntax=docker/dockerfile:1
# svc-tensor: one image for the engine, the gateway and the provenance appliance.
#   build:   compilers, every dependency; builds the native addon (CPU kernels; the AVX2 and
#            AVX-512 ones are picked at run time, so the image runs on any x86-64) and dist/.
#   runtime: Node, the production dependencies, dist/ and the addon; runs as user svc.
# docker build -t svc-tensor .   then see compose.yaml, or:
# docker run --rm -p 127.0.0.1:8000:8000 -e SVC_ENGINE_HOST=0.0.0.0 -e SVC_ENGINE_API_KEYS=... svc-tensor engine
ARG NODE_IMAGE=node:20-bookworm-slim

FROM ${NODE_IMAGE} AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends cmake ninja-build g++ make python3 ca-certificates \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY package.json package-lock.json tsconfig.json CMakeLists.txt binding.gyp ./
COPY scripts ./scripts
COPY native ./native
COPY lib ./lib
COPY server ./server
COPY bin ./bin
# npm ci runs the package's own install script (the native addon) and prepare (tsc into dist/)
RUN npm ci --no-audit --no-fund \
 && test -f build/Release/svc_tensor.node \
 && test -f dist/bin/svc.js \
 && node -e "import('./dist/lib/index.js').then(async (m) => { const s = await m.createStore({ path: ':memory:' }); await s.close(); })"

FROM ${NODE_IMAGE} AS runtime
ENV NODE_ENV=production \
    SVC_ENGINE_DATA_DIR=/var/lib/svc/engine \
    SVC_GATE_DATA_DIR=/var/lib/svc/gate \
    SVC_GATE_AUDIT_LOG_PATH=/var/log/svc-gate/audit.jsonl \
    SVC_PROVENANCE_HOME=/var/lib/svc-provenance \
    SVC_PROVENANCE_CONFIG=/var/lib/svc-provenance/service.env
WORKDIR /app
COPY package.json package-lock.json ./
# production dependencies only; their native parts (lmdb, msgpackr-extract) ship prebuilt
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund && npm cache clean --force
COPY --from=build /src/dist ./dist
COPY --from=build /src/build/Release/svc_tensor.node ./build/Release/svc_tensor.node
# an unprivileged user; its data and log directories 0700 (key files are written 0600)
RUN groupadd --system --gid 10001 svc \
 && useradd --system --uid 10001 --gid svc --home-dir /var/lib/svc --shell /usr/sbin/nologin svc \
 && mkdir -p /var/lib/svc /var/log/svc-gate /var/lib/svc-provenance \
 && chown svc:svc /var/lib/svc /var/log/svc-gate /var/lib/svc-provenance \
 && chmod 0700 /var/lib/svc /var/log/svc-gate /var/lib/svc-provenance
USER svc:svc
# the engine and the appliance listen on 127.0.0.1 unless SVC_ENGINE_HOST / SVC_PROVENANCE_HOST say
# otherwise; the gateway on SVC_GATE_HOST (0.0.0.0 by default); compose.yaml sets all three
EXPOSE 8000 8080 8001
ENTRYPOINT ["node", "/app/dist/bin/svc.js"]
CMD ["engine"]
