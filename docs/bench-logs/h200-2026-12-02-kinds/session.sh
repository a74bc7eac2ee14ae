#!/usr/bin/env bash
mkdir -p /tmp/w
cd /tmp/d0
OUT=/tmp/w/run PHASES="deadline" DEADLINE_PARAMS=/tmp/cuzk-params/deadline bash /tmp/d0/gpu-run.sh > /tmp/w/session.log 2>&1
free -g > /tmp/w/free.txt; nproc > /tmp/w/nproc.txt
touch /tmp/w/done
