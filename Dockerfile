# auditrec: the reconciler's CLI and API (`auditrec serve` listens on 8080).
# Build: docker build -t auditrec .      Run: see docker-compose.yml
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# Only what the wheel needs (pyproject's [tool.hatch.build.targets.wheel]
# packages), so local caches such as .services/ or .venv/ never enter the image.
COPY pyproject.toml README.md ./
COPY statemachine ./statemachine
COPY consumers ./consumers
COPY projections ./projections
RUN pip install . \
    && useradd --create-home --uid 10001 auditrec

USER auditrec
WORKDIR /home/auditrec
# Inside a container the API must listen on all interfaces to be published, so `serve` refuses
# to start (exit 2, naming AUDITREC_API_TOKENS) until tokens are given: the image fails closed.
# AUDITREC_API_ALLOW_OPEN=true runs it without tokens on purpose.
ENV AUDITREC_API_HOST=0.0.0.0 \
    AUDITREC_API_PORT=8080
EXPOSE 8080

ENTRYPOINT ["auditrec"]
CMD ["serve"]
