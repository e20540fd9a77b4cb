# repo2docker-compatible image: JupyterLab as entry point, NB_USER, the repository in $HOME.
# Built with the same bootstrap as `make test` and CI (tools/bootstrap), so CI proves what the image does.
# Network namespaces, tc and BPF need privileges: run with `docker run --privileged -p 8888:8888 IMAGE`.
FROM golang:1.26-bookworm AS go
FROM python:3.11-slim-bookworm
# Go builds the pinned runsc and vegeta (tools/install-go-tools); Debian's golang is too old for gVisor
COPY --from=go /usr/local/go /usr/local/go

ARG NB_USER=jovyan
ARG NB_UID=1000
ENV NB_USER=${NB_USER} NB_UID=${NB_UID} HOME=/home/${NB_USER} DEBIAN_FRONTEND=noninteractive PATH=/usr/local/go/bin:${PATH}

RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends sudo make git ca-certificates \
 && useradd -m -s /bin/bash -u ${NB_UID} ${NB_USER} \
 && echo "${NB_USER} ALL=(ALL) NOPASSWD:ALL" > /etc/sudoers.d/${NB_USER}

COPY --chown=${NB_UID} . ${HOME}
WORKDIR ${HOME}
USER ${NB_USER}
RUN tools/bootstrap
ENV PATH=${HOME}/.venv/bin:${PATH}
EXPOSE 8888
CMD ["jupyter", "lab", "--ip=0.0.0.0", "--port=8888", "--no-browser"]
