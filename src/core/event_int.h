/* SPDX-License-Identifier: MIT */
/*
 * Internals shared by the files behind event.h: poll.c (poll and select, and the
 * readiness helpers below), epoll.c (sets, registrations, epoll_ctl), epoll_ghost.c
 * (ghosts and orphans) and epoll_wait.c. Nothing outside them includes it.
 */
#ifndef ULS_EVENT_INT_H
#define ULS_EVENT_INT_H

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/epoll.h>

struct uls_conn;

/* A sleep that could not register its bell everywhere looks again this often. */
#define BOUNDED_SLEEP_NS 10000000

/* poll.c */
struct uls_conn *uls_ring_conn(int fd);
int uls_kernel_events_for(struct uls_conn *c, int events);
int uls_ready_merge(struct uls_conn *c, int fd, int events, int krev);
int64_t uls_ns_remaining(uint64_t deadline, int64_t timeout_ns);
/* *left (ns, < 0: no limit) cut to a transport's nap while one has work nothing wakes
 * this thread for (uls_transports_nap_ns): 1 when cut, so the wait is not the call's
 * last; 0 and *left as it was otherwise. */
int uls_nap_cap(int64_t *left);

struct epreg {
	int fd;
	uint32_t events;  /* what the program asked for */
	epoll_data_t data; /* what the program registered */
	uint64_t gen;     /* edge-triggered: readiness generation last reported */
	int fired;        /* EPOLLONESHOT: reported, disabled until EPOLL_CTL_MOD */
	int ring;         /* the fd is a ring conn: ulsock decides its readiness */
	uint32_t kev;     /* events registered with the kernel */
	unsigned round;   /* last wait round that reported it */
	unsigned told;    /* the set's cycle when it was last reported (fair_skip) */
	uint64_t seq;     /* when it was last reported, in the set's count of reports */
	int ghost;        /* deleted by the program, still registered with the kernel */
	struct uls_conn *ghost_conn; /* the ghost's conn and its name in its transport */
	uint64_t ghost_id;           /* (tp_id): an fd closed behind ulsock's back has another */
	int closed;       /* its fd was closed: the kernel may still report it (a dup) */
	struct uls_conn *oconn; /* an orphan (see uls_epoll_orphan()): its conn, and a descriptor */
	int ofd;                /* of its socket still open in this process */
};

/* Kernel data of an orphan: the tag and the epreg's address (user addresses are < 2^63). */
#define ORPHAN_TAG (1ull << 63)
/* Kernel data of the set's bell (descriptors and user addresses stay below it). */
#define BELL_TAG (1ull << 62)
/* Kernel data of a transport's wait descriptor in the set (transport.h, wait_fd). */
#define WAIT_FD_TAG (1ull << 61)

struct uls_epoll {
	pthread_mutex_t mu;
	int refs;
	struct epreg **regs; /* indexed by fd */
	int cap;
	unsigned round;
	/*
	 * Fairness across the two sources of events, the rings and the kernel: within a
	 * cycle each registration is reported once, and a new cycle starts when a wait finds
	 * only registrations reported in this one. With maxevents below the number ready, a
	 * level-triggered member is then reported again only after every other member was,
	 * as the kernel's ready list does it; and no kernel descriptor waits behind a set of
	 * busy rings for more than a cycle.
	 */
	unsigned cycle;
	int stale; /* ready registrations this wait skipped as reported in this cycle */
	int *watch;  /* fds whose readiness ulsock may decide: TCP sockets, nested epolls */
	int nwatch, capwatch;
	uint64_t seq;       /* reports so far (epreg.seq) */
	struct epcand *cand; /* user_pass's scratch list, under mu */
	int capcand;
	int epfd;    /* the descriptor the last epoll_ctl named, -1 once closed */
	int shared;  /* another process may use the kernel epoll set (fork): no ghosts */
	uint64_t kernel_seen; /* when a wait last asked the kernel (ns) */
	int bell;             /* the set's bell (bell.h) in its kernel set, or -1 */
	int wait_fd;          /* the transport wait descriptor in its kernel set, or -1 */
	int bounded;          /* this wait could not register the bell everywhere */
	struct epreg **orph;  /* orphans: registrations that outlived their fd */
	int norph, caporph;
	int nghost;           /* ghosts among regs */
};

/* epoll_wait.c: what poll and select see of an epoll descriptor */
/* fd's set, held (uls_epoll_put), when ulsock decides the readiness of some of its members
 * or put descriptors of its own in its kernel set (ghosts, the bell). */
struct uls_epoll *uls_ring_epoll(int fd);
/* POLLIN when a ring member of ep (or of a set nested in it) is ready; with arm, each is
 * armed for a sleep, bell (>= 0) joining it first and *bounded set where it cannot. */
int uls_epoll_rings_ready(struct uls_epoll *ep, int arm, int bell, int *bounded);
/* POLLIN when the kernel says epfd is readable for more than ulsock's own wake-ups. */
int uls_epoll_kernel_ready(struct uls_epoll *ep, int epfd);

/* epoll.c */
void uls_watch_add(struct uls_epoll *ep, int fd);
void uls_watch_del(struct uls_epoll *ep, int fd);
/* fd is a connection on the kernel path, where it stays: no longer worth watching. */
int uls_kernel_for_good(int fd);
uint32_t uls_kernel_epoll_events(struct epreg *r);
int uls_kernel_ctl(struct uls_epoll *ep, int epfd, int op, struct epreg *r);

/* epoll_ghost.c */
int uls_make_ghost(struct uls_epoll *ep, struct epreg *r);
void uls_drop_ghost(struct uls_epoll *ep, int epfd, int fd);
int uls_epoll_revive(struct uls_epoll *ep, int epfd, struct epreg *r, struct epoll_event *ev);
int uls_other_fd(struct uls_conn *c, int fd);
void uls_orphan_drop(struct uls_epoll *ep, int i);
int uls_epoll_orphan(struct uls_epoll *ep, struct epreg *r, int fd);
struct epreg *uls_orphan_of(struct uls_epoll *ep, uint64_t data);
int uls_orphan_valid(struct epreg *r);

#endif
