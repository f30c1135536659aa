/* SPDX-License-Identifier: MIT */
/* The ulflow command with the visualization server's filters built in. */
#include "../apps/vis.h"
#include "ulflow.h"

int main(int argc, char **argv)
{
	vis_register();
	return ulf_main(argc, argv);
}
