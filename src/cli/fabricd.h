/* SPDX-License-Identifier: MIT */
/* `ulsock fabricd`: the fabric transport's directory service (docs/protocol.md 9.3). */
#ifndef ULS_CLI_FABRICD_H
#define ULS_CLI_FABRICD_H

/* argv[0] is "fabricd". Returns the exit status. */
int uls_fabricd_main(int argc, char **argv);

#endif
