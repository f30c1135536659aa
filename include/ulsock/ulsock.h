/* SPDX-License-Identifier: MIT */
/*
 * ulsock: a user-level sockets layer. Programs do not link against it: it is loaded with
 * LD_PRELOAD by `ulsock run`. This header only names the version and the environment
 * variables, for tools that want to set them.
 */
#ifndef ULSOCK_ULSOCK_H
#define ULSOCK_ULSOCK_H

#define ULSOCK_VERSION_MAJOR 0
#define ULSOCK_VERSION_MINOR 1

#define ULSOCK_ENV_PROFILE "ULSOCK_PROFILE"
#define ULSOCK_ENV_LOG "ULSOCK_LOG"
#define ULSOCK_ENV_LOG_FILE "ULSOCK_LOG_FILE"
#define ULSOCK_ENV_RING_SIZE "ULSOCK_RING_SIZE"
#define ULSOCK_ENV_SPIN_US "ULSOCK_SPIN_US"
#define ULSOCK_ENV_RX_PACE_NS "ULSOCK_RX_PACE_NS"
#define ULSOCK_ENV_DISABLE "ULSOCK_DISABLE"
#define ULSOCK_ENV_TRUST_UIDS "ULSOCK_TRUST_UIDS"
#define ULSOCK_ENV_SHORT_CALLS "ULSOCK_SHORT_CALLS"
/* Between hosts (docs/protocol.md, section 9). */
#define ULSOCK_ENV_FABRIC_PEERS "ULSOCK_FABRIC_PEERS"
#define ULSOCK_ENV_FABRIC_PROVIDER "ULSOCK_FABRIC_PROVIDER"
#define ULSOCK_ENV_FABRIC_KEY "ULSOCK_FABRIC_KEY"
#define ULSOCK_ENV_FABRIC_PORT "ULSOCK_FABRIC_PORT"
#define ULSOCK_ENV_FABRIC_WAIT_MS "ULSOCK_FABRIC_WAIT_MS"
#define ULSOCK_ENV_FABRIC_UNTAGGED "ULSOCK_FABRIC_UNTAGGED"

#endif
