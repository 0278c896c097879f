#!/usr/bin/env bash
# Lints the GitHub Actions workflows (.github/workflows/*.yml) with actionlint
# (github.com/rhysd/actionlint: workflow syntax, expressions, action inputs,
# and shellcheck on every `run:` script), built once from the Go module proxy
# and cached like the chart tools (tests/chart/tools.sh).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ACTIONLINT_VERSION="${ACTIONLINT_VERSION:-v1.7.12}"
# shellcheck source=tests/chart/tools.sh
source "${repo}/tests/chart/tools.sh"

dest="${CHART_TOOLS_CACHE}/bin/actionlint-${ACTIONLINT_VERSION}"
go_install_cached "github.com/rhysd/actionlint/cmd/actionlint@${ACTIONLINT_VERSION}" actionlint "${dest}"
cd "${repo}"
"${dest}/actionlint" -no-color "$@"
echo "actionlint ${ACTIONLINT_VERSION}: .github/workflows clean"
