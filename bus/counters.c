/*
 * counters.c - the per-process counters file: writing it, and reading
 * everyone's.
 *
 * Why a file per process.  Operators ask "is anything being lost, and
 * where?" of a running system, from outside it.  A shared-memory file per
 * process, readable by any tool, answers that without a socket, a thread or
 * a lock in the process being watched: its hot threads increment plain
 * counters in memory they own, and a reader maps the file read-only.  The
 * file is named after the pid so that a reader can tell whether its writer
 * is still alive.
 *
 * Invariants.
 *  - One writer per slot's counters (the thread that owns the stream), so
 *    an increment is a relaxed load and store, not a locked RMW.
 *  - Slot identity changes only under `W.lock`, inside a sequence lock, so
 *    a reader never reports half of an add or a remove.
 *  - A file is complete before it can be trusted: the creator stores
 *    `version` last (release); a reader checks it first (acquire), then the
 *    magic and every size against the real file size, so a truncated,
 *    corrupt or foreign file is skipped without a read past its end.
 *  - The writer never truncates its file, so a reader's mapping stays valid
 *    even if the writer exits and the file is unlinked meanwhile.
 *  - A file whose pid is gone (or was reused by a process with another
 *    start time) is stale; readers skip it and may delete it.  Its
 *    writer holds a shared flock on it for life, which the kernel drops
 *    however the writer ends: nothing deletes a file whose lock is held,
 *    and the next process to make its own file deletes the stale ones of
 *    its user (sweep_stale), so crashes do not fill the directory.
 *
 * After fork() the child forgets the parent's file (pthread_atfork) and
 * makes its own on first use; slots inherited from the parent still point
 * into the parent's file and must not be used by the child.
 */
#include "bus/counters.h"

#include "bus/clock.h"
#include "bus/error.h"

#include <infiniband/verbs.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define FILE_SIZE(n, m, h)                                   \
	(sizeof(tb_counters_hdr_t) +                         \
	 (size_t)(n) * sizeof(tb_counter_slot_t) +           \
	 (size_t)(m) * sizeof(tb_counter_mr_t) +             \
	 (size_t)(h) * sizeof(tb_counter_hist_t))
#define FILE_SIZE_MAX \
	FILE_SIZE(TB_COUNTERS_MAX_SLOTS, TB_COUNTERS_MAX_MRS, TB_COUNTERS_MAX_HISTS)

_Static_assert(TB_MR_LOCAL_WRITE == IBV_ACCESS_LOCAL_WRITE, "verbs access");
_Static_assert(TB_MR_REMOTE_WRITE == IBV_ACCESS_REMOTE_WRITE, "verbs access");
_Static_assert(TB_MR_REMOTE_READ == IBV_ACCESS_REMOTE_READ, "verbs access");
_Static_assert(TB_MR_REMOTE_ATOMIC == IBV_ACCESS_REMOTE_ATOMIC, "verbs access");
_Static_assert(TB_MR_MW_BIND == IBV_ACCESS_MW_BIND, "verbs access");

/* How often a reader retries a slot that is being rewritten. */
#define SEQ_RETRIES 100

static const char *const counter_names[TB_CTR_COUNT] = {
	[TB_CTR_PUBLISHED] = "published",
	[TB_CTR_DELIVERED] = "delivered",
	[TB_CTR_GAPS] = "gaps",
	[TB_CTR_LAPPED] = "lapped",
	[TB_CTR_BACK_PRESSURED] = "back_pressured",
	[TB_CTR_RECOVERY_REQUESTS] = "recovery_requests",
	[TB_CTR_RECOVERY_OK] = "recovery_ok",
	[TB_CTR_RECOVERY_FAILED] = "recovery_failed",
	[TB_CTR_ERRORS] = "errors",
	[TB_CTR_DUPLICATES] = "duplicates",
	[TB_CTR_MALFORMED] = "malformed",
	[TB_CTR_MALFORMED_SHORT] = "malformed_short",
	[TB_CTR_MALFORMED_BAD_MAGIC] = "malformed_bad_magic",
	[TB_CTR_MALFORMED_BAD_VERSION] = "malformed_bad_version",
	[TB_CTR_MALFORMED_BAD_LENGTH] = "malformed_bad_length",
	[TB_CTR_MALFORMED_BAD_FLAGS] = "malformed_bad_flags",
	[TB_CTR_MALFORMED_BAD_COUNT] = "malformed_bad_count",
	[TB_CTR_MALFORMED_BAD_FRAME] = "malformed_bad_frame",
	[TB_CTR_MALFORMED_WRONG_STREAM] = "malformed_wrong_stream",
	[TB_CTR_MALFORMED_BAD_SEQ] = "malformed_bad_seq",
	[TB_CTR_REORDERED] = "reordered",
	[TB_CTR_STALE_EPOCH] = "stale_epoch",
	[TB_CTR_REPLAYED] = "replayed",
	[TB_CTR_DATA_LOSS] = "data_loss",
	[TB_CTR_DGRAM_FORGED] = "dgram_forged",
	[TB_CTR_DGRAM_REPLAYED] = "dgram_replayed",
	[TB_CTR_READ_FILLED] = "read_filled",
	[TB_CTR_READ_MISSED] = "read_missed",
};

const char *tb_counter_name(int id)
{
	return id >= 0 && id < TB_CTR_COUNT ? counter_names[id] : "?";
}

const char *tb_mr_use_name(int use)
{
	static const char *const names[TB_MR_USE_COUNT] = {
		[TB_MR_RING_TX] = "ring_tx", [TB_MR_RING_RX] = "ring_rx",
		[TB_MR_CREDIT] = "credit",   [TB_MR_SEND] = "send",
		[TB_MR_RECV] = "recv",       [TB_MR_REPLAY] = "replay",
	};

	return use > 0 && use < TB_MR_USE_COUNT ? names[use] : "?";
}

const char *tb_mr_access_str(uint32_t access, char *buf, size_t len)
{
	static const struct { uint32_t bit; const char *name; } bits[] = {
		{TB_MR_LOCAL_WRITE, "LOCAL_WRITE"},
		{TB_MR_REMOTE_WRITE, "REMOTE_WRITE"},
		{TB_MR_REMOTE_READ, "REMOTE_READ"},
		{TB_MR_REMOTE_ATOMIC, "REMOTE_ATOMIC"},
		{TB_MR_MW_BIND, "MW_BIND"},
	};
	size_t used = 0;
	uint32_t rest = access;

	if (!len)
		return buf;
	buf[0] = '\0';
	for (size_t i = 0; i < sizeof(bits) / sizeof(bits[0]); i++)
		if (access & bits[i].bit) {
			int n = snprintf(buf + used, len - used, "%s%s",
					 used ? "|" : "", bits[i].name);

			if (n < 0 || (size_t)n >= len - used)
				return buf;
			used += (size_t)n;
			rest &= ~bits[i].bit;
		}
	if (rest)
		snprintf(buf + used, len - used, "%s0x%x", used ? "|" : "",
			 rest);
	else if (!used)
		snprintf(buf, len, "none");
	return buf;
}

const char *tb_counter_role_name(int role)
{
	switch (role) {
	case TB_ROLE_PUBLISHER: return "publisher";
	case TB_ROLE_SUBSCRIBER: return "subscriber";
	case TB_ROLE_RECOVERY: return "recovery";
	default: return "?";
	}
}

static const char *counters_dir(const char *dir)
{
	const char *env = getenv("TICKBUS_COUNTERS_DIR");

	if (dir && dir[0])
		return dir;
	return env && env[0] ? env : TB_COUNTERS_DIR_DEFAULT;
}

/* Field 22 of /proc/<pid>/stat (start time in clock ticks since boot), or
 * 0 when it cannot be read.  The command name (field 2) may hold spaces and
 * parentheses, so parsing starts after its last ')'. */
static uint64_t proc_start_ticks(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long long ticks = 0;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	p = strrchr(buf, ')');
	if (!p)
		return 0;
	/* Step to the blank before field 22 (starttime); the first blank
	 * after ')' precedes field 3 (state). */
	for (int field = 3; field <= 22 && p; field++)
		p = strchr(p + 1, ' ');
	if (!p || sscanf(p + 1, "%llu", &ticks) != 1)
		return 0;
	return ticks;
}

/* ---------------------------------------------------------------- writer */

static struct {
	pthread_mutex_t lock;
	pid_t owner; /* the pid whose file this is; 0 = none */
	int fd;      /* the file, open for its lock (held_by_writer) */
	tb_counters_hdr_t *hdr;
	tb_counter_slot_t *slots;
	tb_counter_mr_t *mrs;
	tb_counter_hist_t *hists;
	size_t size;
	int n_active; /* stream slots, MRs and histograms in use */
	int hooks; /* atexit and atfork registered */
	char path[TB_PATH_MAX];
} W = { .lock = PTHREAD_MUTEX_INITIALIZER, .fd = -1 };

/* At exit(), the file goes with the process; after _exit() or a crash it
 * stays, and readers treat it as stale. */
static void at_exit(void)
{
	if (W.owner == getpid() && W.path[0])
		unlink(W.path);
}

static void at_fork_child(void)
{
	pthread_mutex_init(&W.lock, NULL);
	/* The parent's lock is the parent's: our copy of the descriptor
	 * goes (the lock stays while the parent holds its own). */
	if (W.fd >= 0)
		close(W.fd);
	W.fd = -1;
	W.owner = 0;
	W.hdr = NULL;
	W.slots = NULL;
	W.mrs = NULL;
	W.hists = NULL;
	W.size = 0;
	W.n_active = 0;
	W.path[0] = '\0';
}

/* The mode new files get: TB_COUNTERS_MODE_DEFAULT, or $TICKBUS_COUNTERS_
 * MODE when it is an octal mode that keeps the owner's read and write and
 * grants nothing to others and no execute bit. */
static mode_t file_mode(void)
{
	const char *env = getenv("TICKBUS_COUNTERS_MODE");
	unsigned long m;
	char *end;

	if (!env || !env[0])
		return TB_COUNTERS_MODE_DEFAULT;
	errno = 0;
	m = strtoul(env, &end, 8);
	if (errno || *end || m > 0777 || (m & 0600) != 0600 || (m & 0117)) {
		tb_warn("counters: TICKBUS_COUNTERS_MODE=%.8s refused (owner "
			"rw, group r at most, nothing for others); using %04o",
			env, TB_COUNTERS_MODE_DEFAULT);
		return TB_COUNTERS_MODE_DEFAULT;
	}
	return (mode_t)m;
}

/* Creates `path` afresh: O_EXCL and O_NOFOLLOW, so that nobody can hand
 * this process a file (or a link to one) to write its counters into.  A
 * regular file of our own user at the path is a leftover of an earlier
 * process with this pid that died without cleaning up: it is removed and
 * the create tried once more.  Anything else there is refused. */
static int create_file(const char *path, mode_t mode)
{
	struct stat st;
	int fd;

	for (int tries = 0; tries < 2; tries++) {
		fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC |
			  O_NOFOLLOW, mode);
		if (fd >= 0) {
			/* The umask may have narrowed the mode; set it
			 * exactly (it can only have removed bits). */
			if (fchmod(fd, mode) != 0) {
				int rc = tb_error_sys(errno, "counters: chmod "
						      "%s", path);
				close(fd);
				unlink(path);
				return rc;
			}
			return fd;
		}
		if (errno != EEXIST)
			break;
		if (lstat(path, &st) != 0)
			continue; /* gone meanwhile: try again */
		if (!S_ISREG(st.st_mode) || st.st_uid != geteuid())
			return tb_error_set(TB_EBUSY, "counters: %s exists "
					  "and is not a leftover of ours (%s, "
					  "owner uid %u); refused", path,
					  S_ISREG(st.st_mode) ? "regular file"
							      : "not a regular "
								"file",
					  (unsigned)st.st_uid);
		if (unlink(path) != 0 && errno != ENOENT)
			break;
	}
	return tb_error_sys(errno, "counters: create %s", path);
}

static int sweep_stale(const char *dir, pid_t self);

static int open_locked(void)
{
	pid_t pid = getpid();
	const char *dir = counters_dir(NULL);
	tb_counters_hdr_t *h;
	size_t size = FILE_SIZE(TB_COUNTERS_SLOTS, TB_COUNTERS_MRS,
				TB_COUNTERS_HISTS);
	int fd, n, rc;
	void *p;

	if (W.owner == pid)
		return 0;
	n = snprintf(W.path, sizeof(W.path), "%s/" TB_COUNTERS_PREFIX "%d",
		     dir, (int)pid);
	if (n < 0 || (size_t)n >= sizeof(W.path)) {
		W.path[0] = '\0';
		return tb_error_set(TB_EINVAL, "counters: directory name too "
				  "long: %s", dir);
	}
	fd = create_file(W.path, file_mode());
	if (fd < 0) {
		W.path[0] = '\0';
		return fd;
	}
	if (ftruncate(fd, (off_t)size) != 0) {
		rc = tb_error_sys(errno, "counters: size %s", W.path);
		goto fail;
	}
	/* Held for the process's life, and dropped by the kernel however it
	 * ends: what tells a sweep that this file still has its writer. */
	if (flock(fd, LOCK_SH) != 0) {
		rc = tb_error_sys(errno, "counters: lock %s", W.path);
		goto fail;
	}
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		rc = tb_error_sys(errno, "counters: mmap %s", W.path);
		goto fail;
	}
	memset(p, 0, size); /* also faults every page in, off the hot path */
	h = p;
	h->magic = TB_COUNTERS_MAGIC;
	h->hdr_size = sizeof(tb_counters_hdr_t);
	h->slot_size = sizeof(tb_counter_slot_t);
	h->n_slots = TB_COUNTERS_SLOTS;
	h->n_counters = TB_CTR_COUNT;
	h->n_mrs = TB_COUNTERS_MRS;
	h->n_hists = TB_COUNTERS_HISTS;
	h->pid = (int32_t)pid;
	h->start_ticks = proc_start_ticks(pid);
	h->start_ns = tb_clock_realtime_ns();
	snprintf(h->name, sizeof(h->name), "%s", program_invocation_short_name);
	/* R1: the header is complete; pairs with A1 in read_mapped. */
	tb_atomic_store_release(&h->version, TB_COUNTERS_VERSION);

	W.hdr = h;
	W.slots = (tb_counter_slot_t *)(h + 1);
	W.mrs = (tb_counter_mr_t *)(W.slots + TB_COUNTERS_SLOTS);
	W.hists = (tb_counter_hist_t *)(W.mrs + TB_COUNTERS_MRS);
	W.size = size;
	W.fd = fd;
	W.owner = pid;
	W.n_active = 0;
	if (!W.hooks) {
		atexit(at_exit);
		pthread_atfork(NULL, NULL, at_fork_child);
		W.hooks = 1;
	}
	tb_info("counters: %s", W.path);
	sweep_stale(dir, pid);
	return 0;
fail:
	close(fd);
	unlink(W.path);
	W.path[0] = '\0';
	return rc;
}

int tb_counters_open(void)
{
	int rc;

	pthread_mutex_lock(&W.lock);
	rc = open_locked();
	pthread_mutex_unlock(&W.lock);
	return rc;
}

/* Opens the sequence lock of a slot or record (W1): readers now see it changing.
 * Under W.lock, so the relaxed load reads the last writer's own store. */
static uint32_t seq_write_begin(_Atomic uint32_t *sq)
{
	uint32_t seq = tb_atomic_load_relaxed(sq) + 1;

	tb_atomic_store_relaxed(sq, seq);
	/* W1: the odd seq before any field changes; pairs with A3 in
	 * copy_slot and copy_mr/copy_hist, which then sees the seq move. */
	tb_atomic_fence_release();
	return seq;
}

static void seq_write_end(_Atomic uint32_t *sq, uint32_t seq)
{
	/* R2: pairs with A2 in copy_slot and copy_record. */
	tb_atomic_store_release(sq, seq + 1);
}

tb_counter_slot_t *tb_counters_add_stream(uint32_t stream_id, const char *name,
					  tb_counter_role_t role,
					  const char *transport)
{
	tb_counter_slot_t *s = NULL;
	uint32_t seq;

	if (role != TB_ROLE_PUBLISHER && role != TB_ROLE_SUBSCRIBER &&
	    role != TB_ROLE_RECOVERY) {
		tb_error_set(TB_EINVAL, "counters: stream %u: bad role %d",
			   stream_id, (int)role);
		return NULL;
	}
	pthread_mutex_lock(&W.lock);
	if (open_locked() != 0)
		goto out;
	/* Relaxed: `active` changes only under W.lock, held here. */
	for (int i = 0; i < TB_COUNTERS_SLOTS; i++)
		if (!tb_atomic_load_relaxed(&W.slots[i].active)) {
			s = &W.slots[i];
			break;
		}
	if (!s) {
		tb_error_set(TB_EBUSY, "counters: all %d stream slots of %s are "
			   "in use", TB_COUNTERS_SLOTS, W.path);
		goto out;
	}
	seq = seq_write_begin(&s->seq);
	s->stream_id = stream_id;
	s->role = (uint32_t)role;
	memset(s->stream_name, 0, sizeof(s->stream_name));
	memset(s->transport, 0, sizeof(s->transport));
	snprintf(s->stream_name, sizeof(s->stream_name), "%s", name ? name : "");
	snprintf(s->transport, sizeof(s->transport), "%s",
		 transport ? transport : "");
	/* Relaxed: inside the sequence lock (W1 .. R2). */
	for (int i = 0; i < TB_CTR_CAPACITY; i++)
		tb_atomic_store_relaxed(&s->c[i], 0);
	tb_atomic_store_relaxed(&s->active, 1);
	seq_write_end(&s->seq, seq);
	W.n_active++;
out:
	pthread_mutex_unlock(&W.lock);
	return s;
}

tb_counter_slot_t *tb_counters_take_stream(tb_counter_slot_t *own,
					   uint32_t stream_id, const char *name,
					   tb_counter_role_t role,
					   const char *transport)
{
	tb_counter_slot_t *s = tb_counters_add_stream(stream_id, name, role,
						      transport);

	if (s)
		return s;
	tb_warn("stream '%s': counters not shared (%s)", name, tb_errmsg());
	return own;
}

void tb_counters_remove_stream(tb_counter_slot_t *slot)
{
	uint32_t seq;

	if (!slot)
		return;
	pthread_mutex_lock(&W.lock);
	if (W.owner == getpid() && slot >= W.slots &&
	    slot < W.slots + TB_COUNTERS_SLOTS &&
	    tb_atomic_load_relaxed(&slot->active)) {
		seq = seq_write_begin(&slot->seq);
		/* Relaxed: inside the sequence lock (W1 .. R2). */
		tb_atomic_store_relaxed(&slot->active, 0);
		seq_write_end(&slot->seq, seq);
		W.n_active--;
	}
	pthread_mutex_unlock(&W.lock);
}

/* Free records: under W.lock (relaxed: `active` changes only under it). */
static tb_counter_mr_t *free_mr(void)
{
	for (int i = 0; i < TB_COUNTERS_MRS; i++)
		if (!tb_atomic_load_relaxed(&W.mrs[i].active))
			return &W.mrs[i];
	return NULL;
}

static tb_counter_hist_t *free_hist(void)
{
	for (int i = 0; i < TB_COUNTERS_HISTS; i++)
		if (!tb_atomic_load_relaxed(&W.hists[i].active))
			return &W.hists[i];
	return NULL;
}

tb_counter_mr_t *tb_counters_mr_add_raw(uint32_t stream_id,
					tb_counter_role_t role, tb_mr_use_t use,
					const char *transport, const void *addr,
					uint64_t length, uint32_t access,
					uint32_t lkey, uint32_t rkey)
{
	tb_counter_mr_t *r = NULL;
	uint32_t seq;

	pthread_mutex_lock(&W.lock);
	if (open_locked() != 0) {
		tb_warn("stream %u: memory registration not recorded (%s)",
			stream_id, tb_errmsg());
		goto out;
	}
	r = free_mr();
	if (!r) {
		tb_warn("stream %u: memory registration not recorded (all %d "
			"records of %s in use)", stream_id, TB_COUNTERS_MRS,
			W.path);
		goto out;
	}
	/* The sequence lock of a stream slot, on the same fields. */
	seq = seq_write_begin(&r->seq);
	r->stream_id = stream_id;
	r->role = (uint32_t)role;
	r->use = (uint32_t)use;
	r->addr = (uint64_t)(uintptr_t)addr;
	r->length = length;
	r->access = access;
	r->lkey = lkey;
	r->rkey = rkey;
	r->n_peers = 0;
	memset(r->peer, 0, sizeof(r->peer));
	memset(r->transport, 0, sizeof(r->transport));
	snprintf(r->transport, sizeof(r->transport), "%s",
		 transport ? transport : "");
	tb_atomic_store_relaxed(&r->active, 1);
	seq_write_end(&r->seq, seq);
	W.n_active++;
out:
	pthread_mutex_unlock(&W.lock);
	return r;
}

/* 1 if `p` is one of this process's records in `base`. */
static int own_record(const void *p, const void *base, int n, size_t size)
{
	const char *c = p, *b = base;

	return W.owner == getpid() && base && c >= b &&
	       c < b + (size_t)n * size && (size_t)(c - b) % size == 0;
}

void tb_counters_mr_peer(tb_counter_mr_t *r, const char *peer)
{
	uint32_t seq;

	if (!r)
		return;
	pthread_mutex_lock(&W.lock);
	if (own_record(r, W.mrs, TB_COUNTERS_MRS, sizeof(*r)) &&
	    tb_atomic_load_relaxed(&r->active)) {
		seq = seq_write_begin(&r->seq);
		r->n_peers++;
		memset(r->peer, 0, sizeof(r->peer));
		snprintf(r->peer, sizeof(r->peer), "%s", peer ? peer : "?");
		seq_write_end(&r->seq, seq);
	}
	pthread_mutex_unlock(&W.lock);
}

/* Frees a record (its seq and active fields) if it is in use.  Under
 * W.lock. */
static void record_free_locked(_Atomic uint32_t *sq, _Atomic uint32_t *active)
{
	uint32_t seq;

	if (!tb_atomic_load_relaxed(active))
		return;
	seq = seq_write_begin(sq);
	tb_atomic_store_relaxed(active, 0);
	seq_write_end(sq, seq);
	W.n_active--;
}

void tb_counters_mr_remove(tb_counter_mr_t *r)
{
	if (!r)
		return;
	pthread_mutex_lock(&W.lock);
	if (own_record(r, W.mrs, TB_COUNTERS_MRS, sizeof(*r)))
		record_free_locked(&r->seq, &r->active);
	pthread_mutex_unlock(&W.lock);
}

tb_counter_hist_t *tb_counters_hist_add(uint32_t stream_id,
					tb_counter_role_t role,
					const char *name)
{
	tb_counter_hist_t *h = NULL;
	uint32_t seq;
	size_t i;

	pthread_mutex_lock(&W.lock);
	if (open_locked() != 0) {
		tb_warn("histogram '%s' not exported (%s)", name ? name : "",
			tb_errmsg());
		goto out;
	}
	h = free_hist();
	if (!h) {
		tb_warn("histogram '%s' not exported (all %d of %s in use)",
			name ? name : "", TB_COUNTERS_HISTS, W.path);
		goto out;
	}
	seq = seq_write_begin(&h->seq);
	h->stream_id = stream_id;
	h->role = (uint32_t)role;
	memset(h->name, 0, sizeof(h->name));
	for (i = 0; name && name[i] && i < sizeof(h->name) - 1; i++) {
		char c = name[i];

		h->name[i] = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')
				     ? c : c >= 'A' && c <= 'Z' ? (char)(c + 32)
				     : '_';
	}
	/* Relaxed: inside the sequence lock; the owner starts recording
	 * only after this returns. */
	tb_atomic_store_relaxed(&h->sum_ns, 0);
	for (int b = 0; b < TB_COUNTERS_HIST_BUCKETS; b++)
		tb_atomic_store_relaxed(&h->b[b], 0);
	tb_atomic_store_relaxed(&h->active, 1);
	seq_write_end(&h->seq, seq);
	W.n_active++;
out:
	pthread_mutex_unlock(&W.lock);
	return h;
}

void tb_counters_hist_remove(tb_counter_hist_t *h)
{
	if (!h)
		return;
	pthread_mutex_lock(&W.lock);
	if (own_record(h, W.hists, TB_COUNTERS_HISTS, sizeof(*h)))
		record_free_locked(&h->seq, &h->active);
	pthread_mutex_unlock(&W.lock);
}

void tb_counters_heartbeat(void)
{
	tb_counters_hdr_t *h = W.hdr;

	if (h && W.owner == getpid())
		/* Relaxed, unpaired: readers take it as a number and read
		 * nothing on its strength. */
		tb_atomic_store_relaxed(&h->heartbeat_ns,
					tb_clock_realtime_ns());
}

int tb_counters_close(void)
{
	int rc = 0;

	pthread_mutex_lock(&W.lock);
	if (W.owner == getpid()) {
		if (W.n_active > 0) {
			rc = tb_error_set(TB_EBUSY, "counters: %d streams, "
					"registrations or histograms still "
					"use %s", W.n_active, W.path);
		} else {
			munmap(W.hdr, W.size);
			unlink(W.path);
			close(W.fd);
			W.fd = -1;
			W.hdr = NULL;
			W.slots = NULL;
			W.mrs = NULL;
			W.hists = NULL;
			W.owner = 0;
			W.path[0] = '\0';
		}
	}
	pthread_mutex_unlock(&W.lock);
	return rc;
}

const char *tb_counters_path(void)
{
	return W.owner == getpid() ? W.path : "";
}

/* ---------------------------------------------------------------- reader */

/* Copies string field `src` (maybe without a NUL) into `dst`. */
static void copy_str(char *dst, size_t dlen, const char *src, size_t slen)
{
	size_t n = strnlen(src, slen < dlen ? slen : dlen - 1);

	memcpy(dst, src, n);
	dst[n] = '\0';
}

/* A consistent copy of slot `s`: 1 active, 0 free or never steady. */
static int copy_slot(const tb_counter_slot_t *cs, uint32_t n_counters,
		     tb_counters_stream_t *out)
{
	tb_counter_slot_t *s = (tb_counter_slot_t *)cs; /* atomics: no const */
	char name[sizeof(s->stream_name)], transport[sizeof(s->transport)];

	for (int tries = 0; tries < SEQ_RETRIES; tries++) {
		/* A2 pairs with R2 in seq_write_end: a steady slot's fields. */
		uint32_t seq = tb_atomic_load_acquire(&s->seq);
		uint32_t active;

		if (seq & 1)
			continue;
		/* Relaxed: validated by the seq re-check after A3. */
		active = tb_atomic_load_relaxed(&s->active);
		out->stream_id = s->stream_id;
		out->role = s->role;
		memcpy(name, s->stream_name, sizeof(name));
		memcpy(transport, s->transport, sizeof(transport));
		/* A3 pairs with W1 in seq_write_begin: if a field read above
		 * was changed, this re-load sees seq moved. */
		tb_atomic_fence_acquire();
		if (tb_atomic_load_relaxed(&s->seq) != seq)
			continue;
		if (!active)
			return 0;
		copy_str(out->name, sizeof(out->name), name, sizeof(name));
		copy_str(out->transport, sizeof(out->transport), transport,
			 sizeof(transport));
		memset(out->c, 0, sizeof(out->c));
		/* Relaxed, unpaired: each counter an untorn number, perhaps
		 * a moment old (tb_counter_add). */
		for (uint32_t i = 0; i < n_counters; i++)
			out->c[i] = tb_atomic_load_relaxed(&s->c[i]);
		return 1;
	}
	return 0;
}

/* A consistent copy of MR record `r`: 1 active, 0 free or never steady.
 * The same sequence lock as copy_slot (A2, A3). */
static int copy_mr(const tb_counter_mr_t *cr, tb_counters_mr_t *out)
{
	tb_counter_mr_t *r = (tb_counter_mr_t *)cr; /* atomics: no const */
	tb_counter_mr_t c;

	for (int tries = 0; tries < SEQ_RETRIES; tries++) {
		/* A2 pairs with R2 in seq_write_end. */
		uint32_t seq = tb_atomic_load_acquire(&r->seq);

		if (seq & 1)
			continue;
		/* Relaxed: validated by the seq re-check after A3. */
		tb_atomic_store_relaxed(&c.active,
					tb_atomic_load_relaxed(&r->active));
		c.stream_id = r->stream_id;
		c.role = r->role;
		c.addr = r->addr;
		c.length = r->length;
		c.access = r->access;
		c.use = r->use;
		c.lkey = r->lkey;
		c.rkey = r->rkey;
		c.n_peers = r->n_peers;
		memcpy(c.peer, r->peer, sizeof(c.peer));
		memcpy(c.transport, r->transport, sizeof(c.transport));
		/* A3 pairs with W1 in seq_write_begin. */
		tb_atomic_fence_acquire();
		if (tb_atomic_load_relaxed(&r->seq) != seq)
			continue;
		if (!tb_atomic_load_relaxed(&c.active))
			return 0;
		out->stream_id = c.stream_id;
		out->role = c.role;
		out->use = c.use;
		out->access = c.access;
		out->addr = c.addr;
		out->length = c.length;
		out->lkey = c.lkey;
		out->rkey = c.rkey;
		out->n_peers = c.n_peers;
		copy_str(out->peer, sizeof(out->peer), c.peer, sizeof(c.peer));
		copy_str(out->transport, sizeof(out->transport), c.transport,
			 sizeof(c.transport));
		return 1;
	}
	return 0;
}

/* A copy of histogram `h`: its identity under the sequence lock (A2, A3),
 * then its counts, each an untorn number perhaps a moment old. */
static int copy_hist(const tb_counter_hist_t *ch, tb_counters_hist_t *out)
{
	tb_counter_hist_t *h = (tb_counter_hist_t *)ch; /* atomics: no const */
	char name[sizeof(h->name)];

	for (int tries = 0; tries < SEQ_RETRIES; tries++) {
		/* A2 pairs with R2 in seq_write_end. */
		uint32_t seq = tb_atomic_load_acquire(&h->seq);
		uint32_t active;

		if (seq & 1)
			continue;
		/* Relaxed: validated by the seq re-check after A3. */
		active = tb_atomic_load_relaxed(&h->active);
		out->stream_id = h->stream_id;
		out->role = h->role;
		memcpy(name, h->name, sizeof(name));
		/* A3 pairs with W1 in seq_write_begin. */
		tb_atomic_fence_acquire();
		if (tb_atomic_load_relaxed(&h->seq) != seq)
			continue;
		if (!active)
			return 0;
		copy_str(out->name, sizeof(out->name), name, sizeof(name));
		out->count = 0;
		/* Relaxed, unpaired: counts (tb_counter_hist_record). */
		for (int i = 0; i < TB_COUNTERS_HIST_BUCKETS; i++) {
			out->b[i] = tb_atomic_load_relaxed(&h->b[i]);
			out->count += out->b[i];
		}
		out->sum_ns = tb_atomic_load_relaxed(&h->sum_ns);
		return 1;
	}
	return 0;
}

/* Checks and copies a mapped file of `size` bytes. */
static int read_mapped(const char *path, const unsigned char *base,
		       size_t size, tb_counters_proc_t *out)
{
	tb_counters_hdr_t *h = (tb_counters_hdr_t *)base;
	uint32_t version;

	if (size < offsetof(tb_counters_hdr_t, hdr_size))
		return tb_error_set(TB_EFORMAT, "counters: %s: truncated "
				  "(%zu bytes)", path, size);
	/* A1 pairs with R1 in open_locked: the header is complete. */
	version = tb_atomic_load_acquire(&h->version);
	if (version != TB_COUNTERS_VERSION)
		return tb_error_set(TB_EFORMAT, "counters: %s: format version "
				  "%u, expected %u%s", path, version,
				  TB_COUNTERS_VERSION,
				  version == 0 ? " (being created?)" : "");
	if (size < sizeof(*h))
		return tb_error_set(TB_EFORMAT, "counters: %s: truncated "
				  "header (%zu bytes)", path, size);
	if (h->magic != TB_COUNTERS_MAGIC)
		return tb_error_set(TB_EFORMAT, "counters: %s: bad magic", path);
	if (h->hdr_size != sizeof(*h) ||
	    h->slot_size != sizeof(tb_counter_slot_t))
		return tb_error_set(TB_EFORMAT, "counters: %s: header or slot "
				  "size %u/%u, expected %zu/%zu", path,
				  h->hdr_size, h->slot_size, sizeof(*h),
				  sizeof(tb_counter_slot_t));
	if (h->n_slots == 0 || h->n_slots > TB_COUNTERS_MAX_SLOTS ||
	    h->n_counters > TB_CTR_CAPACITY || h->n_mrs > TB_COUNTERS_MAX_MRS ||
	    h->n_hists > TB_COUNTERS_MAX_HISTS)
		return tb_error_set(TB_EFORMAT, "counters: %s: implausible "
				  "counts (%u slots, %u counters, %u MRs, %u "
				  "histograms)", path, h->n_slots,
				  h->n_counters, h->n_mrs, h->n_hists);
	if (size != FILE_SIZE(h->n_slots, h->n_mrs, h->n_hists))
		return tb_error_set(TB_EFORMAT, "counters: %s: %zu bytes, "
				  "%zu expected for %u slots, %u MRs and %u "
				  "histograms", path, size,
				  FILE_SIZE(h->n_slots, h->n_mrs, h->n_hists),
				  h->n_slots, h->n_mrs, h->n_hists);

	out->pid = h->pid;
	copy_str(out->name, sizeof(out->name), h->name, sizeof(h->name));
	out->start_ticks = h->start_ticks;
	out->start_ns = h->start_ns;
	/* Relaxed, unpaired: a number (tb_counters_heartbeat). */
	out->heartbeat_ns = tb_atomic_load_relaxed(&h->heartbeat_ns);
	out->n_counters = h->n_counters;
	out->n_streams = 0;
	for (uint32_t i = 0; i < h->n_slots; i++) {
		const tb_counter_slot_t *s =
			(const tb_counter_slot_t *)(base + sizeof(*h)) + i;

		if (copy_slot(s, h->n_counters, &out->streams[out->n_streams]))
			out->n_streams++;
	}
	{
		const tb_counter_mr_t *mrs = (const tb_counter_mr_t *)
			(base + FILE_SIZE(h->n_slots, 0, 0));
		const tb_counter_hist_t *hists = (const tb_counter_hist_t *)
			(base + FILE_SIZE(h->n_slots, h->n_mrs, 0));

		out->n_mrs = 0;
		for (uint32_t i = 0; i < h->n_mrs; i++)
			if (copy_mr(&mrs[i], &out->mrs[out->n_mrs]))
				out->n_mrs++;
		out->n_hists = 0;
		for (uint32_t i = 0; i < h->n_hists; i++)
			if (copy_hist(&hists[i], &out->hists[out->n_hists]))
				out->n_hists++;
	}
	return 0;
}

int tb_counters_read_file(const char *path, tb_counters_proc_t *out)
{
	struct stat st;
	void *p;
	int fd, rc;

	if (!path || !out)
		return tb_error_set(TB_EINVAL, "counters: read_file: NULL "
				  "argument");
	memset(out, 0, offsetof(tb_counters_proc_t, streams));
	snprintf(out->path, sizeof(out->path), "%s", path);
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0)
		return tb_error_sys(errno, "counters: open %s", path);
	if (fstat(fd, &st) != 0) {
		rc = tb_error_sys(errno, "counters: stat %s", path);
		close(fd);
		return rc;
	}
	if (!S_ISREG(st.st_mode) || st.st_size <= 0 ||
	    (uint64_t)st.st_size > FILE_SIZE_MAX) {
		close(fd);
		return tb_error_set(TB_EFORMAT, "counters: %s: not a counters "
				  "file (%lld bytes%s)", path,
				  (long long)st.st_size,
				  S_ISREG(st.st_mode) ? "" : ", not regular");
	}
	p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return tb_error_sys(errno, "counters: mmap %s", path);
	rc = read_mapped(path, p, (size_t)st.st_size, out);
	munmap(p, (size_t)st.st_size);
	return rc;
}

/* The pid in a file name "tickbus-counters.<pid>", or 0. */
static pid_t name_pid(const char *name)
{
	const size_t plen = strlen(TB_COUNTERS_PREFIX);
	long v = 0;

	if (strncmp(name, TB_COUNTERS_PREFIX, plen) != 0 || !name[plen])
		return 0;
	for (const char *p = name + plen; *p; p++) {
		if (*p < '0' || *p > '9')
			return 0;
		v = v * 10 + (*p - '0');
		if (v > 0x7fffffff)
			return 0;
	}
	return (pid_t)v;
}

static int pid_dead(pid_t pid)
{
	return kill(pid, 0) != 0 && errno == ESRCH;
}

/* Whether a process holds the lock every writer keeps on its file for
 * its life (open_locked).  The kernel drops it when the writer ends,
 * however it ends, so a file nobody holds has no writer: not here, and
 * not in another pid namespace sharing the directory, where kill() says
 * ESRCH of a live pid.  1 held, 0 not held, -1 cannot tell (gone, or not
 * ours to open). */
static int held_by_writer(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	int held;

	if (fd < 0)
		return -1;
	/* Exclusive, not waiting: refused while any writer holds its
	 * shared lock (or anything else goes wrong: then "held"). */
	held = flock(fd, LOCK_EX | LOCK_NB) != 0;
	close(fd);
	return held;
}

/* A file younger than this is never swept: a writer takes its lock just
 * after it creates its file (open_locked), and one in another pid
 * namespace, whose pid looks gone from here, is not yet locked then. */
#define SWEEP_AGE_S 2

/* Removes the counters files in `dir` that are our user's, whose pid is
 * gone, whose lock nobody holds and that are SWEEP_AGE_S old: what
 * processes that crashed or left by _exit (no atexit) left behind.
 * Without this they pile up in a tmpfs, 62 KiB each (one run of the tests
 * left 454), until someone runs a reader that reaps (tb-stat).  Called
 * when this process (`self`) makes its own file, so once a process.
 * Returns how many it removed. */
static int sweep_stale(const char *dir, pid_t self)
{
	time_t now = time(NULL);
	uid_t uid = geteuid();
	struct dirent *e;
	int removed = 0;
	DIR *dp = opendir(dir);

	if (!dp)
		return 0;
	while ((e = readdir(dp)) != NULL) {
		pid_t pid = name_pid(e->d_name);
		char path[TB_PATH_MAX];
		struct stat st;
		int n;

		if (pid <= 0 || pid == self)
			continue;
		n = snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (n < 0 || (size_t)n >= sizeof(path) ||
		    lstat(path, &st) != 0 || !S_ISREG(st.st_mode) ||
		    st.st_uid != uid || st.st_mtime > now - SWEEP_AGE_S ||
		    !pid_dead(pid) || held_by_writer(path) != 0)
			continue;
		if (unlink(path) == 0)
			removed++;
	}
	closedir(dp);
	if (removed)
		tb_info("counters: removed %d files of processes gone from %s",
			removed, dir);
	return removed;
}

int tb_counters_read_dir(const char *dir, unsigned flags, tb_counters_fn fn,
			 void *arg)
{
	return tb_counters_read_dir_reap(dir, flags, fn, arg, NULL);
}

int tb_counters_read_dir_reap(const char *dir, unsigned flags,
			      tb_counters_fn fn, void *arg, int *reaped)
{
	const char *d = counters_dir(dir);
	tb_counters_proc_t *proc;
	struct dirent *e;
	int delivered = 0;
	DIR *dp;

	if (reaped)
		*reaped = 0;
	if (!fn)
		return tb_error_set(TB_EINVAL, "counters: read_dir: no callback");
	dp = opendir(d);
	if (!dp)
		return tb_error_sys(errno, "counters: open directory %s", d);
	proc = malloc(sizeof(*proc));
	if (!proc) {
		closedir(dp);
		return tb_error_set(TB_ENOMEM, "counters: out of memory");
	}
	while ((e = readdir(dp)) != NULL) {
		pid_t pid = name_pid(e->d_name);
		char path[TB_PATH_MAX];
		int stale, n;

		if (pid <= 0)
			continue;
		n = snprintf(path, sizeof(path), "%s/%s", d, e->d_name);
		if (n < 0 || (size_t)n >= sizeof(path))
			continue;
		stale = pid_dead(pid);
		if (!stale) {
			if (tb_counters_read_file(path, proc) != 0) {
				tb_info("%s; skipped", tb_errmsg());
				continue;
			}
			if (proc->pid != pid) {
				tb_info("counters: %s holds pid %d; skipped",
					path, (int)proc->pid);
				continue;
			}
			/* The pid is alive, but is it the writer? */
			stale = proc->start_ticks != 0 &&
				proc_start_ticks(pid) != proc->start_ticks &&
				proc_start_ticks(pid) != 0;
		}
		if (stale) {
			if ((flags & TB_COUNTERS_DELETE_STALE) &&
			    held_by_writer(path) == 0) {
				tb_info("counters: removing %s (process %d is "
					"gone)", path, (int)pid);
				if (unlink(path) == 0 && reaped)
					(*reaped)++;
			}
			continue;
		}
		delivered++;
		if (fn(arg, proc) != 0)
			break;
	}
	closedir(dp);
	free(proc);
	return delivered;
}
