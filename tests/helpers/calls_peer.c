/*
 * calls_peer: a plain TCP echo server for tests that need a peer outside ulsock (the test runs
 * it without the preload, so connections to it stay on the kernel path).
 *
 * Listens on 127.0.0.1 (or ::1 with -6) on an ephemeral port, prints "port N" on stdout,
 * then echoes every accepted connection until EOF. It serves up to COUNT connections
 * (default 1) one after another and exits. Usage: calls_peer [-6] [COUNT].
 */
#include "calls_common.h"

static void echo(int fd)
{
	char buf[65536];
	ssize_t r;

	while ((r = read(fd, buf, sizeof(buf))) > 0)
		calls_write_all(fd, buf, (size_t)r);
	close(fd);
}

int main(int argc, char **argv)
{
	struct calls_addr a;
	int family = AF_INET;
	int count = 1;
	int lfd;

	calls_case_name = "peer";
	calls_watchdog();
	signal(SIGPIPE, SIG_IGN);
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-6") == 0)
			family = AF_INET6;
		else
			count = atoi(argv[i]);
	}
	lfd = calls_listen(family, &a, NULL);
	dprintf(1, "port %d\n", calls_addr_port(&a));
	for (int i = 0; i < count; i++)
		echo(calls_accept(lfd));
	close(lfd);
	return 0;
}
