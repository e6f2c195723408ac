/*
 * The fabric: one sparse tmpfs file, /dev/shm/softrdma.<SOFTRDMA_FABRIC>,
 * mapped by every process that opens the device under that fabric name.
 *
 * Layout: header | process table | MR table | CQ slots | QP slots |
 * multicast groups.  Slots are
 * fixed-size, so any process finds any object from its number alone (a QP
 * from the slot bits of its qpn, an MR from the slot bits of its key) with no
 * lookup structure to keep consistent.  Unused slots are holes in the file.
 *
 * Allocation and freeing of slots, and attach/detach, happen under flock() on
 * the file: the kernel drops the lock when a process dies, so a crash never
 * wedges the fabric.  The data path never takes that lock.
 *
 * A process attaches once (first ibv_open_device) and detaches when its last
 * context closes.  The last live process to detach unlinks the file, so a
 * test that closes what it opened leaves nothing in /dev/shm.  Entries of
 * processes that died are reclaimed by the next attach.
 *
 * Notifications (completion-channel events, async events) are datagrams on
 * abstract AF_UNIX sockets named "softrdma/<fabric>/<pid>/<kind><id>": no
 * files to clean up, and any process can wake any other.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "softrdma.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define SR_PAGE 4096u
#define SR_ALIGN_UP(x, a) (((x) + (a) - 1) & ~((uint64_t)(a) - 1))

static pthread_mutex_t fab_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sr_fabric *fab_cur;

static uint64_t proc_starttime(pid_t pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	char *p = strrchr(buf, ')'); /* comm may contain spaces */
	if (!p)
		return 0;
	/* after ") " comes field 3; starttime is field 22 */
	int field = 2;
	for (p++; *p && field < 21; p++)
		if (*p == ' ')
			field++;
	return strtoull(p, NULL, 10);
}

int sr_proc_alive(const struct sr_proc_shm *p)
{
	pid_t pid = atomic_load(&p->pid);
	if (pid <= 0)
		return 0;
	if (kill(pid, 0) < 0 && errno == ESRCH)
		return 0;
	return proc_starttime(pid) == p->starttime;
}

static const char *fabric_name(void)
{
	const char *n = getenv(SR_FABRIC_ENV);
	return (n && *n) ? n : SR_FABRIC_DEFAULT;
}

static int name_ok(const char *n)
{
	size_t len = strlen(n);
	if (len == 0 || len > SR_FABRIC_NAME_MAX)
		return 0;
	for (size_t i = 0; i < len; i++) {
		char c = n[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.'))
			return 0;
	}
	return 1;
}

static struct sr_fabric_shm *hdr(struct sr_fabric *f)
{
	return (struct sr_fabric_shm *)f->base;
}

struct sr_proc_shm *sr_fabric_proc(struct sr_fabric *f, uint32_t i)
{
	return (struct sr_proc_shm *)(f->base + hdr(f)->off_procs) + i;
}

struct sr_mr_shm *sr_fabric_mr(struct sr_fabric *f, uint32_t slot)
{
	return (struct sr_mr_shm *)(f->base + hdr(f)->off_mrs) + slot;
}

struct sr_cq_shm *sr_fabric_cq(struct sr_fabric *f, uint32_t slot)
{
	return (struct sr_cq_shm *)(f->base + hdr(f)->off_cqs +
				    (uint64_t)slot * hdr(f)->cq_slot_size);
}

struct sr_qp_shm *sr_fabric_qp(struct sr_fabric *f, uint32_t slot)
{
	return (struct sr_qp_shm *)(f->base + hdr(f)->off_qps +
				    (uint64_t)slot * hdr(f)->qp_slot_size);
}

struct sr_mcg_shm *sr_fabric_mcg(struct sr_fabric *f, uint32_t slot)
{
	return (struct sr_mcg_shm *)(f->base + hdr(f)->off_mcgs) + slot;
}

/* Takes qpn out of every group; frees groups left empty.  Fabric lock held. */
void sr_mcg_remove_qpn_locked(struct sr_fabric *f, uint32_t qpn)
{
	for (uint32_t g = 0; g < SR_MAX_MCG; g++) {
		struct sr_mcg_shm *m = sr_fabric_mcg(f, g);
		if (!atomic_load(&m->in_use))
			continue;
		int left = 0;
		for (uint32_t i = 0; i < SR_MCG_MEMBERS; i++) {
			if (atomic_load(&m->member[i]) == qpn)
				atomic_store(&m->member[i], 0);
			left += atomic_load(&m->member[i]) != 0;
		}
		if (!left)
			atomic_store(&m->in_use, 0);
	}
}

static void layout(struct sr_fabric_shm *h)
{
	uint64_t off = SR_PAGE;
	h->hdr_size = sizeof *h;
	h->max_procs = SR_MAX_PROCS;
	h->max_mrs = SR_MAX_MRS;
	h->max_cqs = SR_MAX_CQS;
	h->max_qps = SR_MAX_QPS;
	h->mr_slot_size = sizeof(struct sr_mr_shm);
	h->cq_slot_size = SR_ALIGN_UP(sizeof(struct sr_cq_shm), SR_PAGE);
	h->qp_slot_size = SR_ALIGN_UP(sizeof(struct sr_qp_shm), SR_PAGE);
	h->off_procs = off;
	off = SR_ALIGN_UP(off + SR_MAX_PROCS * sizeof(struct sr_proc_shm), SR_PAGE);
	h->off_mrs = off;
	off = SR_ALIGN_UP(off + SR_MAX_MRS * sizeof(struct sr_mr_shm), SR_PAGE);
	h->off_cqs = off;
	off += (uint64_t)SR_MAX_CQS * h->cq_slot_size;
	h->off_qps = off;
	off += (uint64_t)SR_MAX_QPS * h->qp_slot_size;
	h->off_mcgs = off;
	h->max_mcgs = SR_MAX_MCG;
	off = SR_ALIGN_UP(off + SR_MAX_MCG * sizeof(struct sr_mcg_shm), SR_PAGE);
	h->total_size = off;
}

/* Free every slot whose owner is pid (a dead process, or us at detach). */
static void reclaim_pid(struct sr_fabric *f, pid_t pid)
{
	for (uint32_t i = 0; i < SR_MAX_MRS; i++) {
		struct sr_mr_shm *m = sr_fabric_mr(f, i);
		if (atomic_load(&m->key) && m->pid == pid)
			atomic_store(&m->key, 0);
	}
	for (uint32_t i = 0; i < SR_MAX_CQS; i++) {
		struct sr_cq_shm *c = sr_fabric_cq(f, i);
		if (atomic_load(&c->in_use) && c->pid == pid)
			atomic_store(&c->in_use, 0);
	}
	for (uint32_t i = 0; i < SR_MAX_QPS; i++) {
		struct sr_qp_shm *q = sr_fabric_qp(f, i);
		if (atomic_load(&q->in_use) && q->pid == pid) {
			atomic_store(&q->state, IBV_QPS_ERR);
			sr_mcg_remove_qpn_locked(f, q->qpn);
			atomic_store(&q->in_use, 0);
		}
	}
}

static int lock_file(int fd)
{
	while (flock(fd, LOCK_EX) < 0)
		if (errno != EINTR)
			return -1;
	return 0;
}

static struct sr_fabric *attach_new(void)
{
	const char *name = fabric_name();
	if (!name_ok(name)) {
		fprintf(stderr, "softrdma: %s='%s' is not a valid fabric name "
			"(1-%d of [A-Za-z0-9._-])\n", SR_FABRIC_ENV, name,
			SR_FABRIC_NAME_MAX);
		errno = EINVAL;
		return NULL;
	}
	char path[128];
	snprintf(path, sizeof path, "/dev/shm/softrdma.%s", name);

	struct sr_fabric *f = calloc(1, sizeof *f);
	if (!f)
		return NULL;
	snprintf(f->name, sizeof f->name, "%s", name);
	f->evsock = -1;

	int fd;
	struct stat st;
	for (;;) {
		fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (fd < 0)
			goto fail_free;
		if (lock_file(fd) < 0 || fstat(fd, &st) < 0)
			goto fail_close;
		if (st.st_nlink > 0)
			break;
		close(fd);      /* unlinked by the last detacher: start over */
	}

	struct sr_fabric_shm want = {0};
	layout(&want);
	if (st.st_size == 0) {
		if (ftruncate(fd, (off_t)want.total_size) < 0)
			goto fail_close;
	} else if ((uint64_t)st.st_size != want.total_size) {
		errno = EPROTO;
		goto fail_close;
	}
	f->size = want.total_size;
	f->base = mmap(NULL, f->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (f->base == MAP_FAILED)
		goto fail_close;
	struct sr_fabric_shm *h = hdr(f);
	if (st.st_size == 0) {
		*h = want;
		h->magic = SR_FABRIC_MAGIC;
		atomic_store(&h->next_id, 1);
		atomic_store(&h->version, SR_FABRIC_VERSION); /* last */
	} else if (atomic_load(&h->version) != SR_FABRIC_VERSION ||
		   h->magic != SR_FABRIC_MAGIC ||
		   h->total_size != want.total_size ||
		   h->off_qps != want.off_qps || h->off_mcgs != want.off_mcgs) {
		errno = EPROTO;
		goto fail_unmap;
	}

	/* Reclaim what dead processes left, then take a process slot. */
	uint32_t mine = UINT32_MAX;
	for (uint32_t i = 0; i < SR_MAX_PROCS; i++) {
		struct sr_proc_shm *p = sr_fabric_proc(f, i);
		if (atomic_load(&p->pid) && !sr_proc_alive(p)) {
			reclaim_pid(f, atomic_load(&p->pid));
			atomic_store(&p->pid, 0);
		}
		if (!atomic_load(&p->pid) && mine == UINT32_MAX)
			mine = i;
	}
	if (mine == UINT32_MAX) {
		errno = EAGAIN;
		goto fail_unmap;
	}
	f->pid = getpid();
	f->proc = mine;
	/* Peers write into us with process_vm_writev, which needs ptrace
	 * access; under Yama's ptrace_scope=1 that takes our consent.  (Fails
	 * harmlessly where Yama is absent.) */
	prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
	sr_fabric_proc(f, mine)->starttime = proc_starttime(f->pid);
	for (int i = 0; i < SR_CTX_PER_PROC; i++)
		atomic_store(&sr_fabric_proc(f, mine)->ctx[i], 0);
	sr_port_init(&sr_fabric_proc(f, mine)->port);
	atomic_store(&sr_fabric_proc(f, mine)->pid, f->pid);
	reclaim_pid(f, f->pid); /* a previous holder of our pid */
	flock(fd, LOCK_UN);
	f->fd = fd;
	return f;

fail_unmap:
	munmap(f->base, f->size);
fail_close: {
	int e = errno;
	close(fd);
	errno = e;
}
fail_free: {
	int e = errno;
	free(f);
	errno = e;
	return NULL;
}
}

/* softrdma-ctl: maps an existing fabric without joining it as a process. */
int sr_fabric_map(struct sr_fabric *f, const char *name)
{
	char path[128];
	struct stat st;
	memset(f, 0, sizeof *f);
	f->evsock = -1;
	f->pid = getpid();
	snprintf(f->name, sizeof f->name, "%s", name);
	snprintf(path, sizeof path, "/dev/shm/softrdma.%s", name);
	struct sr_fabric_shm want = {0};
	layout(&want);
	f->fd = open(path, O_RDWR | O_CLOEXEC);
	if (f->fd < 0)
		return -1;
	if (fstat(f->fd, &st) < 0 || (uint64_t)st.st_size != want.total_size) {
		close(f->fd);
		errno = EPROTO;
		return -1;
	}
	f->size = want.total_size;
	f->base = mmap(NULL, f->size, PROT_READ | PROT_WRITE, MAP_SHARED, f->fd, 0);
	if (f->base == MAP_FAILED ||
	    atomic_load(&hdr(f)->version) != SR_FABRIC_VERSION ||
	    hdr(f)->magic != SR_FABRIC_MAGIC) {
		if (f->base != MAP_FAILED)
			munmap(f->base, f->size);
		close(f->fd);
		errno = EPROTO;
		return -1;
	}
	return 0;
}

struct sr_fabric *sr_fabric_attach(void)
{
	pthread_mutex_lock(&fab_lock);
	struct sr_fabric *f = fab_cur;
	if (f && f->pid != getpid())
		f = NULL; /* inherited across fork: the child attaches anew */
	if (!f) {
		f = attach_new();
		if (f)
			fab_cur = f;
	}
	if (f)
		f->refs++;
	pthread_mutex_unlock(&fab_lock);
	return f;
}

struct sr_fabric *sr_fabric_get(void)
{
	return fab_cur;
}

void sr_fabric_detach(struct sr_fabric *f)
{
	pthread_mutex_lock(&fab_lock);
	if (--f->refs > 0 || f->pid != getpid()) {
		pthread_mutex_unlock(&fab_lock);
		return;
	}
	lock_file(f->fd);
	reclaim_pid(f, f->pid);
	atomic_store(&sr_fabric_proc(f, f->proc)->pid, 0);
	int live = 0;
	for (uint32_t i = 0; i < SR_MAX_PROCS; i++) {
		struct sr_proc_shm *p = sr_fabric_proc(f, i);
		if (atomic_load(&p->pid) && sr_proc_alive(p))
			live++;
	}
	if (!live) {
		char path[128];
		snprintf(path, sizeof path, "/dev/shm/softrdma.%s", f->name);
		unlink(path);
	}
	flock(f->fd, LOCK_UN);
	close(f->fd);
	if (f->evsock >= 0)
		close(f->evsock);
	munmap(f->base, f->size);
	if (fab_cur == f)
		fab_cur = NULL;
	free(f);
	pthread_mutex_unlock(&fab_lock);
}

/* Slots are found by linear scan under the file lock: set-up path only. */
int sr_fabric_alloc_slot(struct sr_fabric *f, int kind, uint32_t *slot)
{
	if (lock_file(f->fd) < 0)
		return -1;
	int ret = -1;
	errno = ENOMEM;
	uint32_t max = kind == SR_SLOT_MR ? SR_MAX_MRS :
		       kind == SR_SLOT_CQ ? SR_MAX_CQS : SR_MAX_QPS;
	/* Key slot 0 is never used: a key is never 0, whatever its byte. */
	for (uint32_t i = kind == SR_SLOT_MR ? 1 : 0; i < max; i++) {
		_Atomic uint32_t *use =
			kind == SR_SLOT_MR ? &sr_fabric_mr(f, i)->key :
			kind == SR_SLOT_CQ ? &sr_fabric_cq(f, i)->in_use :
					     &sr_fabric_qp(f, i)->in_use;
		if (atomic_load(use) == 0) {
			/* Mark busy with a placeholder; the caller publishes
			 * the real key / in_use after filling the slot. */
			atomic_store(use, UINT32_MAX);
			*slot = i;
			ret = 0;
			break;
		}
	}
	flock(f->fd, LOCK_UN);
	return ret;
}

void sr_fabric_free_slot(struct sr_fabric *f, int kind, uint32_t slot)
{
	lock_file(f->fd);
	if (kind == SR_SLOT_MR) {
		atomic_store(&sr_fabric_mr(f, slot)->key, 0);
	} else {
		uint8_t *s = kind == SR_SLOT_CQ ? (uint8_t *)sr_fabric_cq(f, slot)
						: (uint8_t *)sr_fabric_qp(f, slot);
		size_t sz = kind == SR_SLOT_CQ ? hdr(f)->cq_slot_size
					       : hdr(f)->qp_slot_size;
		/* Give the ring pages back; the first page keeps the
		 * generation so numbers are not reused at once. */
		fallocate(f->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			  (off_t)(s - f->base) + SR_PAGE, (off_t)(sz - SR_PAGE));
		atomic_store(kind == SR_SLOT_CQ ? &((struct sr_cq_shm *)s)->in_use
						: &((struct sr_qp_shm *)s)->in_use,
			     0);
	}
	flock(f->fd, LOCK_UN);
}

int sr_fabric_lock(struct sr_fabric *f)
{
	return lock_file(f->fd);
}

void sr_fabric_unlock(struct sr_fabric *f)
{
	flock(f->fd, LOCK_UN);
}

uint32_t sr_fabric_next_id(struct sr_fabric *f)
{
	return atomic_fetch_add(&hdr(f)->next_id, 1);
}

void sr_fabric_sockname(const struct sr_fabric *f, pid_t pid, char kind,
			uint32_t id, void *sunp, unsigned *len)
{
	struct sockaddr_un *sun = sunp;
	memset(sun, 0, sizeof *sun);
	sun->sun_family = AF_UNIX;
	/* abstract namespace: leading NUL, no file */
	int n = snprintf(sun->sun_path + 1, sizeof sun->sun_path - 1,
			 "softrdma/%s/%d/%c%u", f->name, (int)pid, kind, id);
	*len = (unsigned)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

int sr_fabric_bind_socket(struct sr_fabric *f, char kind, uint32_t id)
{
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	struct sockaddr_un sun;
	unsigned len;
	sr_fabric_sockname(f, f->pid, kind, id, &sun, &len);
	if (bind(fd, (struct sockaddr *)&sun, len) < 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

/* Best effort: a receiver that went away simply misses the wake-up. */
void sr_fabric_notify(struct sr_fabric *f, pid_t pid, char kind, uint32_t id,
		      const void *msg, size_t len)
{
	int s = __atomic_load_n(&f->evsock, __ATOMIC_ACQUIRE);
	if (s < 0) {
		s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		if (s < 0)
			return;
		int expect = -1;
		if (!__atomic_compare_exchange_n(&f->evsock, &expect, s, 0,
						 __ATOMIC_ACQ_REL,
						 __ATOMIC_ACQUIRE)) {
			close(s);
			s = expect;
		}
	}
	struct sockaddr_un sun;
	unsigned alen;
	sr_fabric_sockname(f, pid, kind, id, &sun, &alen);
	while (sendto(s, msg, len, MSG_DONTWAIT, (struct sockaddr *)&sun, alen) < 0 &&
	       errno == EINTR)
		;
}
