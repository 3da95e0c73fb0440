#!/bin/sh
# An ssh stand-in for `orchard launch --ssh`: "HOST" is a network namespace of this machine.
# Called as: netns-ssh.sh -o BatchMode=yes NAMESPACE COMMAND
shift 2
namespace=$1
shift
exec ip netns exec "$namespace" sh -c "$1"
