# The fakegpu DRA plugin with the fake libnvidia-ml.so.1 inside.
#
# BASE is any Debian bookworm image with python3 (3.11) and its venv module:
#   - where a registry is reachable: the default, python:3.11-slim-bookworm;
#   - offline (fakegpu kind image): a Debian base fakegpu assembles with debootstrap and imports.
# The Python side comes from a wheelhouse prepared beside this file (build/kind/wheelhouse:
# `pip wheel .` of this tree: fakegpu's wheel carries the compiled library), so the image build
# itself needs no network, no compiler, and gives the same image for the same inputs.
ARG BASE=python:3.11-slim-bookworm

# Two stages so the wheels never become a layer of the result, without needing BuildKit
# (Debian's docker.io and the legacy builder build this file too).
FROM ${BASE} AS install
# Lets fakegpu remove this stage's leftover image, and nothing else.
LABEL dev.fakegpu.stage=install
ARG WHEELHOUSE=build/kind/wheelhouse
COPY ${WHEELHOUSE}/ /wheels/
RUN python3 -m venv /opt/fakegpu \
 && /opt/fakegpu/bin/pip install --no-cache-dir --no-index --find-links /wheels fakegpu \
 && /opt/fakegpu/bin/fakegpu --version \
 && find /opt/fakegpu -name '__pycache__' -prune -exec rm -rf {} +

FROM ${BASE}
# iproute2's `ip`: the NIC plugin makes its veth pairs with it (fakegpu/nic/netdev.py). The
# offline base has it already (nothing fetched); python:3.11-slim-bookworm gets it from Debian.
RUN command -v ip >/dev/null || { apt-get update \
 && apt-get install -y --no-install-recommends iproute2 && rm -rf /var/lib/apt/lists/*; }
COPY --from=install /opt/fakegpu /opt/fakegpu
ENV PATH=/opt/fakegpu/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

# The plugin's version stamp (fakegpu/plugin/version.py): upgrade tests build two or three
# images of one tree that differ only here. Empty: the package version.
ARG PLUGIN_VERSION=""
RUN if [ -n "$PLUGIN_VERSION" ]; then echo "$PLUGIN_VERSION" > /opt/fakegpu/VERSION; fi

# Non-root by default (65532, the "nonroot" user of distroless images). The Helm chart runs
# it as root with every capability dropped: it writes into the kubelet's root-owned plugin
# directories on the host, and nothing else.
USER 65532:65532
ENTRYPOINT ["/opt/fakegpu/bin/python", "-m", "fakegpu.node.entrypoint"]
