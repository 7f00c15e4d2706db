#!/usr/bin/env bash
# Run a sparkqos job with spark-submit from the project's own virtualenv.
#
#   ./spark-submit.sh jobs/simulate_demo.py [job arguments]
#   ./spark-submit.sh --master 'local[2]' --conf spark.ui.enabled=false jobs/....py
#
# On first use (and whenever pyproject.toml changes) it creates .venv and installs the package
# there. Spark options given here come after the defaults below, so they win.
# Environment: PYTHON (interpreter for the virtualenv, default python3), SPARKQOS_VENV
# (virtualenv folder, default ./.venv), JAVA_HOME (where Java 17 lives, if not on PATH).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${SPARKQOS_VENV:-$here/.venv}"
python="${PYTHON:-python3}"

if [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ]; then
  java="$JAVA_HOME/bin/java"
else
  java="$(command -v java || true)"
fi
if [ -z "$java" ] || ! "$java" -version >/dev/null 2>&1; then
  echo "spark-submit.sh: no Java runtime found (looked at \$JAVA_HOME and PATH)." >&2
  echo "  Spark 4 needs Java 17 or 21: install one (e.g. 'apt-get install openjdk-17-jre-headless')" >&2
  echo "  or set JAVA_HOME to its folder." >&2
  exit 2
fi

if ! command -v "$python" >/dev/null 2>&1 || ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "spark-submit.sh: sparkqos needs Python 3.11 or newer; '$python' is missing or older." >&2
  echo "  Set PYTHON to a Python 3.11+ interpreter." >&2
  exit 2
fi

stamp="$venv/.sparkqos-installed"
want="$(cksum < "$here/pyproject.toml")"
if [ ! -x "$venv/bin/python" ] || [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "spark-submit.sh: setting up $venv (first run: downloads pyspark, a few minutes)..." >&2
  [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip >&2
  "$venv/bin/python" -m pip install -q -e "$here[plot]" >&2
  echo "$want" > "$stamp"
fi

# A job that needs an optional extra says so in a line "# sparkqos-extras: NAME[,NAME]" near its
# top (jobs/vessel_monitor.py: data, the recorded AIS trace); install it once, on first use.
for arg in "$@"; do
  case "$arg" in
    *.py)
      if [ -f "$arg" ]; then
        extras="$(head -n 40 "$arg" | sed -n 's/^# sparkqos-extras: *\([a-z,]*\) *$/\1/p' | head -n 1)"
        if [ -n "$extras" ] && [ "$(cat "$venv/.sparkqos-extras-$extras" 2>/dev/null)" != "$want" ]; then
          echo "spark-submit.sh: installing the extra(s) $extras that $arg needs (first run only)..." >&2
          "$venv/bin/python" -m pip install -q -e "$here[plot,$extras]" >&2
          echo "$want" > "$venv/.sparkqos-extras-$extras"
        fi
      fi
      break
      ;;
  esac
done

# Spark's Python processes (the driver, the workers, the Python sources' runners) run the venv's
# Python through sparkqos/spark/spark-python, which has them import pyspark from the venv (cached
# bytecode) rather than from Spark's pyspark.zip, which each process would compile anew (~0.35 s).
export SPARKQOS_PYTHON="$venv/bin/python"
export PYSPARK_PYTHON="$here/sparkqos/spark/spark-python"
export PYSPARK_DRIVER_PYTHON="$here/sparkqos/spark/spark-python"
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"

exec "$venv/bin/spark-submit" \
  --master 'local[*]' \
  --conf spark.log.level=WARN \
  --conf spark.sql.shuffle.partitions=4 \
  --conf spark.sql.execution.arrow.pyspark.enabled=true \
  "$@"
