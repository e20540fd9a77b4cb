# repo2docker-compatible image: JupyterLab as entry point, NB_USER, the repository in $HOME.
# Built with the same bootstrap as `make test` and CI (tools/bootstrap), so CI proves what the image does.
# Network namespaces, tc and BPF need privileges: run with `docker run --privileged -p 8888:8888 IMAGE` (README, "Docker").
#
# The base images are build arguments. By default they are the public ones (Binder, any machine with a registry); without
# a registry, researchkit.runtimes.docker_engine.base_images() makes local stand-ins and tests/test_image.py builds this
# file with them: --build-arg BASE_IMAGE=… --build-arg GO_IMAGE=… --build-arg TOOLS_IMAGE=….
ARG BASE_IMAGE=python:3.11-slim-bookworm
ARG GO_IMAGE=golang:1.26-bookworm
# TOOLS_IMAGE: an image whose /opt/researchkit-tools holds builds of the pinned Go tools (tools/go-tools.txt) to reuse. The
# default, the Go image, holds none, so tools/bootstrap builds them here (runsc, Fabric, vegeta: ~10 min on 2 cores).
ARG TOOLS_IMAGE=${GO_IMAGE}

FROM ${GO_IMAGE} AS go
FROM ${TOOLS_IMAGE} AS tools
RUN mkdir -p /opt/researchkit-tools

FROM ${BASE_IMAGE}
# Go builds the pinned runsc, vegeta and Fabric (tools/install-go-tools); Debian's golang is too old for gVisor
COPY --from=go /usr/local/go /usr/local/go

ARG NB_USER=jovyan
ARG NB_UID=1000
ENV NB_USER=${NB_USER} NB_UID=${NB_UID} HOME=/home/${NB_USER} DEBIAN_FRONTEND=noninteractive PATH=/usr/local/go/bin:${PATH}

RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends sudo make git ca-certificates python3 python3-venv \
 && rm -rf /var/lib/apt/lists/* \
 && useradd -m -s /bin/bash -u ${NB_UID} ${NB_USER} \
 && echo "${NB_USER} ALL=(ALL) NOPASSWD:ALL" > /etc/sudoers.d/${NB_USER}

WORKDIR ${HOME}
USER ${NB_USER}
# The dependencies first, in layers of their own: reused while apt.txt, requirements.txt and what tools/bootstrap --deps-only
# runs (the bootstrap, the Go tools' list, builder and sources) do not change; another script in tools/ rebuilds nothing
COPY --chown=${NB_UID} apt.txt requirements.txt pyproject.toml ${HOME}/
COPY --chown=${NB_UID} tools/bootstrap tools/install-go-tools tools/go-tools.txt ${HOME}/tools/
COPY --chown=${NB_UID} tools/go ${HOME}/tools/go
# made by the user first: COPY would create the missing parents of its destination as root
RUN mkdir -p ${HOME}/.cache/researchkit/tools
COPY --from=tools --chown=${NB_UID} /opt/researchkit-tools/ ${HOME}/.cache/researchkit/tools/
RUN tools/bootstrap --deps-only
# Then the repository (.dockerignore keeps the host's .venv and caches out) and researchkit itself
COPY --chown=${NB_UID} . ${HOME}
RUN tools/bootstrap
ENV PATH=${HOME}/.venv/bin:${PATH}
EXPOSE 8888
CMD ["jupyter", "lab", "--ip=0.0.0.0", "--port=8888", "--no-browser"]
