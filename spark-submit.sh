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
# top (jobs/vessel_monitor.py: data, the recorded AIS trace); a configuration can need one too:
# job.sink = "delta" (a --set after the job, or its configuration file: --config, else
# conf/JOB.toml) needs delta. Each is installed once, on first use.
job=""
config=""
sink=""
prev=""
for arg in "$@"; do
  if [ -z "$job" ]; then
    case "$arg" in *.py) [ -f "$arg" ] && job="$arg" ;; esac
    continue
  fi
  case "$prev" in
    --set) setting="$arg" ;;
    --config) config="$arg"; setting="" ;;
    *) setting="" ;;
  esac
  case "$arg" in
    --set=*) setting="${arg#--set=}" ;;
    --config=*) config="${arg#--config=}" ;;
  esac
  case "$setting" in
    job.sink=*) sink="$(printf '%s' "${setting#job.sink=}" | tr -d "\"' ")" ;;
  esac
  prev="$arg"
done
# A job can ask for JVM options the same way: "# sparkqos-java-options: OPTIONS" (the main and
# vessel jobs: C1 code only and the serial collector, see docs/guide.md "A small machine").
# Scripts without the line (the benchmarks, which compare with native Spark) run the JVM's
# defaults.
java_options=""
if [ -n "$job" ]; then
  java_options="$(head -n 40 "$job" | sed -n 's/^# sparkqos-java-options: *\(.*[^ ]\) *$/\1/p' | head -n 1)"
  extras="$(head -n 40 "$job" | sed -n 's/^# sparkqos-extras: *\([a-z,]*\) *$/\1/p' | head -n 1)"
  [ -n "$config" ] || config="$here/conf/$(basename "$job" .py).toml"
  if [ -z "$sink" ] && [ -f "$config" ]; then
    sink="$(sed -n 's/^[[:space:]]*sink[[:space:]]*=[[:space:]]*"\([a-z]*\)".*$/\1/p' "$config" | head -n 1)"
  fi
  [ "$sink" = delta ] && extras="${extras:+$extras,}delta"
  missing=""
  for extra in ${extras//,/ }; do
    [ "$(cat "$venv/.sparkqos-extras-$extra" 2>/dev/null)" = "$want" ] || missing="${missing:+$missing,}$extra"
  done
  if [ -n "$missing" ]; then
    echo "spark-submit.sh: installing the extra(s) $missing that $job needs (first run only)..." >&2
    "$venv/bin/python" -m pip install -q -e "$here[plot,$missing]" >&2
    for extra in ${missing//,/ }; do echo "$want" > "$venv/.sparkqos-extras-$extra"; done
  fi
fi

# Spark's Python processes (the driver, the workers, the Python sources' runners) run the venv's
# Python through sparkqos/spark/spark-python, which has them import pyspark from the venv (cached
# bytecode) rather than from Spark's pyspark.zip, which each process would compile anew (~0.35 s).
export SPARKQOS_PYTHON="$venv/bin/python"
export PYSPARK_PYTHON="$here/sparkqos/spark/spark-python"
export PYSPARK_DRIVER_PYTHON="$here/sparkqos/spark/spark-python"
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"

# Spark logs warnings and errors only, from the JVM's first line (conf/log4j2.properties),
# and draws no stage progress bars: a job prints its own line per trigger.
exec "$venv/bin/spark-submit" \
  --master 'local[*]' \
  --conf "spark.driver.extraJavaOptions=-Dlog4j2.configurationFile=file:$here/conf/log4j2.properties${java_options:+ $java_options}" \
  --conf spark.ui.showConsoleProgress=false \
  --conf spark.sql.shuffle.partitions=4 \
  --conf spark.sql.execution.arrow.pyspark.enabled=true \
  "$@"
