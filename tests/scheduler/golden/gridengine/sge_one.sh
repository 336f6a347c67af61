#!/bin/bash
#$ -S /bin/bash
#$ -N j123
#$ -o /logs
#$ -e /logs
#$ -cwd
#$ -V
#$ -r y
#$ -notify

exec python 'a b'
