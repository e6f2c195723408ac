/*
 * transport/shm.c - set-up, files, liveness, epochs and resynchronisation
 * of the shared-memory ring.  The per-frame paths are static inline in
 * transport/shm.h (whose essay tells the design); this file holds what runs
 * once, when the ring is idle, or when a reader was lapped or met a frame
 * the writer could not have written.
 */
#include "bus/transport/shm.h"

#include "bus/config.h"
#include "bus/counters.h"
#include "bus/error.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* A reader idle for this long looks at the writer's liveness and the path. */
#define TB_SHM_CHECK_NS 1000000ull
/* Attempts at a consistent mark while the writer changes it (a writer
 * stopped half way through, e.g. killed, keeps it odd for good). */
#define MARK_TRIES 1000
/* Attempts at walking to the live end while the writer laps the walk. */
#define WALK_TRIES 8
/* Fresh names tried for a new ring file beside the path. */
#define CREATE_TRIES 16

/* ------------------------------------------------------------ files */

int tb_shm_access_of(const tb_stream_cfg_t *cfg, tb_shm_access_t *acc)
{
	acc->group = (gid_t)-1;
	acc->mode = cfg->shm_mode ? (mode_t)cfg->shm_mode :
		    cfg->shm_group[0] ? TB_SHM_MODE_GROUP_DEFAULT :
					TB_SHM_MODE_DEFAULT;
	if (cfg->shm_group[0]) {
		char buf[4096];
		struct group gr, *res = NULL;
		char *end;
		unsigned long id = strtoul(cfg->shm_group, &end, 10);

		if (*end == '\0' && end != cfg->shm_group) {
			acc->group = (gid_t)id;
		} else if (getgrnam_r(cfg->shm_group, &gr, buf, sizeof(buf),
				      &res) == 0 && res) {
			acc->group = res->gr_gid;
		} else {
			return tb_error_set(TB_ECONFIG, "shm: stream '%s': "
					  "shm_group '%s' is not a group of "
					  "this host", cfg->name, cfg->shm_group);
		}
	}
	return 0;
}

/* What a file that is not a regular one is, for messages. */
static const char *file_kind(mode_t m)
{
	if (S_ISFIFO(m))
		return "a FIFO";
	if (S_ISLNK(m))
		return "a symbolic link";
	if (S_ISDIR(m))
		return "a directory";
	if (S_ISSOCK(m))
		return "a socket";
	if (S_ISCHR(m) || S_ISBLK(m))
		return "a device";
	return "not a regular file";
}

/*
 * Whether a reader may trust the ring file `st`: a regular file owned by
 * this user or root, or in the configured group; no more open than the
 * configured mode; writable by its owner alone.  0, or TB_EAUTH /
 * TB_EFORMAT with a message naming `path`.
 */
static int check_trusted(const struct stat *st, const tb_shm_access_t *acc,
			 const char *path)
{
	uid_t me = geteuid();
	mode_t perm = st->st_mode & 07777;

	if (!S_ISREG(st->st_mode))
		return tb_error_set(TB_EFORMAT, "shm: %s is %s, not a tickbus "
				  "ring; remove it or fix shm_path", path,
				  file_kind(st->st_mode));
	if (st->st_uid != me && st->st_uid != 0 &&
	    !(acc->group != (gid_t)-1 && st->st_gid == acc->group))
		return tb_error_set(TB_EAUTH, "shm: %s belongs to uid %u, whom "
				  "this reader (uid %u) does not trust: a ring "
				  "must be its own user's, root's or in "
				  "shm_group; remove it or fix shm_path", path,
				  (unsigned)st->st_uid, (unsigned)me);
	if (perm & (S_IWGRP | S_IWOTH | S_ISUID | S_ISGID | S_ISVTX))
		return tb_error_set(TB_EAUTH, "shm: %s has mode %04o: others "
				  "than its owner could write it; not trusted",
				  path, (unsigned)perm);
	if (perm & ~acc->mode)
		return tb_error_set(TB_EAUTH, "shm: %s has mode %04o, more open "
				  "than shm_mode %04o; not trusted", path,
				  (unsigned)perm, (unsigned)acc->mode);
	return 0;
}

/* Opens `path` for reading without following a link or waiting on a FIFO
 * and checks it is a regular file.  The fd, or -1 with errno (ENOENT: none;
 * EFTYPE-like cases as EINVAL, *st filled). */
static int open_regular(const char *path, int flags, struct stat *st)
{
	int fd = open(path, flags | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);

	if (fd < 0)
		return -1;
	if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
		int e = errno;

		close(fd);
		errno = S_ISREG(st->st_mode) ? e : EINVAL;
		return -1;
	}
	return fd;
}

/* A beat from the future (clock skew between processes) counts as fresh. */
static int beat_stale(const tb_shm_hdr_t *hdr, uint64_t now_ns, uint64_t limit_ns)
{
	int64_t age = (int64_t)(now_ns - tb_atomic_load_relaxed(&hdr->heartbeat_ns));

	return age > (int64_t)limit_ns;
}

/* 1 if the ring's writer is open and beating. */
static int ring_live(const tb_shm_hdr_t *hdr, uint64_t liveness_ns)
{
	return tb_atomic_load_acquire(&hdr->state) == TB_SHM_OPEN && /* A3 */
	       !beat_stale(hdr, tb_clock_now_ns(), liveness_ns);
}

/* A tickbus ring of format 1 or 2: their liveness fields coincide. */
static int is_ring(const tb_shm_hdr_t *hdr, ssize_t got)
{
	return got >= (ssize_t)offsetof(tb_shm_hdr_t, beat_seq) &&
	       hdr->magic == TB_SHM_MAGIC &&
	       (hdr->version == 1 || hdr->version == TB_SHM_VERSION);
}

/*
 * What is at `path` before a publisher puts its ring there: 0 when nothing
 * is, or a tickbus ring it may replace (its own user's, not live; or
 * another user's, whose liveness it does not take on trust: renaming over
 * it fails unless this process may replace that user's file).  TB_EBUSY
 * for a live ring of this user, TB_EFORMAT for anything else.
 */
static int check_path(const char *path, uint64_t liveness_ns, int *own_ring)
{
	tb_shm_hdr_t hdr;
	struct stat st;
	ssize_t got;
	int fd;

	*own_ring = 0;
	if (lstat(path, &st) != 0)
		return errno == ENOENT ? 0 :
		       tb_error_sys(errno, "shm: stat %s", path);
	if (!S_ISREG(st.st_mode))
		return tb_error_set(TB_EFORMAT, "shm: %s is %s, not a tickbus "
				  "ring; refusing to replace it: remove it or "
				  "fix shm_path", path, file_kind(st.st_mode));
	fd = open_regular(path, O_RDONLY, &st);
	if (fd < 0)
		return tb_error_sys(errno, "shm: open %s to see what it is "
				  "before replacing it", path);
	memset(&hdr, 0, sizeof(hdr));
	got = pread(fd, &hdr, sizeof(hdr), 0);
	close(fd);
	if (!is_ring(&hdr, got))
		return tb_error_set(TB_EFORMAT, "shm: %s is a file of %lld bytes "
				  "that is not a tickbus ring; refusing to "
				  "replace it: remove it or fix shm_path", path,
				  (long long)st.st_size);
	if (st.st_uid != geteuid())
		return 0; /* not ours: its claims are not evidence */
	*own_ring = 1;
	if (hdr.state != TB_SHM_OPEN || hdr.pid <= 0 ||
	    (kill(hdr.pid, 0) != 0 && errno == ESRCH) ||
	    beat_stale(&hdr, tb_clock_now_ns(), liveness_ns))
		return 0;
	return tb_error_set(TB_EBUSY, "shm: %s is owned by a running "
			  "publisher (pid %d, format %u); stop it or use another "
			  "shm_path", path, (int)hdr.pid, hdr.version);
}

/* Marks this user's ring now at `path`, if any, REPLACED so that its
 * readers move on (format 1 readers too: same field, same value). */
static void mark_replaced(const char *path)
{
	struct stat st;
	int fd = open_regular(path, O_RDWR, &st);
	tb_shm_hdr_t *old;

	if (fd < 0)
		return;
	if (st.st_uid != geteuid() || st.st_size < (off_t)TB_SHM_HDR_SIZE) {
		close(fd);
		return;
	}
	old = mmap(NULL, TB_SHM_HDR_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (old == MAP_FAILED)
		return;
	if (is_ring(old, TB_SHM_HDR_SIZE))
		tb_atomic_store_release(&old->state, TB_SHM_REPLACED);
	munmap(old, TB_SHM_HDR_SIZE);
}

/* `dir of where` + "/" + `basename of path`: the ring's final name beside
 * the file tb_mem actually created (on hugetlbfs, that is not /dev/shm). */
static int sibling(const char *where, const char *path, char *out, size_t len)
{
	const char *slash = strrchr(where, '/');
	const char *base = strrchr(path, '/');
	int n;

	base = base ? base + 1 : path;
	n = snprintf(out, len, "%.*s%s", slash ? (int)(slash - where + 1) : 0,
		     where, base);
	return n >= 0 && (size_t)n < len ? 0 : -1;
}

/* ------------------------------------------------------------ writer */

int tb_shm_writer_open(tb_shm_writer_t *w, const tb_stream_cfg_t *cfg,
		       uint64_t epoch)
{
	char path[TB_PATH_MAX], tmp[TB_PATH_MAX + 48];
	size_t len = TB_SHM_HDR_SIZE + cfg->ring_size;
	int node = cfg->subscriber_core >= 0 ?
		   tb_mem_node_of_core(cfg->subscriber_core) : -1;
	uint64_t liveness_ns = (uint64_t)cfg->liveness_timeout_ms * 1000000ull;
	tb_shm_access_t acc;
	tb_shm_hdr_t *hdr;
	int rc, own_ring;

	memset(w, 0, sizeof(*w));
	if (!tb_ring_size_ok(cfg->ring_size))
		return tb_error_set(TB_EINVAL, "shm: ring_size %llu is not a power of "
				  "two between 64 KiB and 1 GiB",
				  (unsigned long long)cfg->ring_size);
	if (tb_stream_cfg_shm_path(cfg, path, sizeof(path)) < 0)
		return tb_error_prepend(TB_EINVAL, "shm");
	rc = tb_shm_access_of(cfg, &acc);
	if (rc < 0)
		return rc;
	{
		char where[TB_PATH_MAX];

		if (tb_mem_shared_locate(path, where, sizeof(where)) < 0)
			return tb_error_prepend(TB_EINVAL, "shm");
		if ((rc = check_path(where, liveness_ns, &own_ring)) < 0)
			return rc;
	}

	/* Build the ring beside the old one under a fresh name (O_EXCL:
	 * never a file or link someone put there), then rename it into
	 * place, so a reader never sees a ring half made.  The ring goes on
	 * the NUMA node of the subscribers' core when one is configured. */
	rc = TB_EBUSY;
	for (int i = 0; i < CREATE_TRIES && rc == TB_EBUSY; i++) {
		snprintf(tmp, sizeof(tmp), "%s.%d.%d.new", path, (int)getpid(), i);
		rc = tb_mem_create_shared(&w->mem, tmp, len, node, 0, acc.mode,
					  acc.group);
	}
	if (rc < 0)
		return tb_error_prepend(rc, "shm");
	tb_info("shm: ring %s: %zu bytes on %s pages, node %d%s", path, len,
		tb_mem_page_kind_name(w->mem.page_kind), w->mem.numa_node,
		w->mem.locked ? ", locked" : "");

	hdr = w->mem.addr;
	hdr->magic = TB_SHM_MAGIC;
	hdr->hdr_size = TB_SHM_HDR_SIZE;
	hdr->ring_size = cfg->ring_size;
	hdr->epoch = epoch;
	hdr->stream_id = cfg->id;
	hdr->pid = (int32_t)getpid();
	hdr->start_ns = tb_clock_now_ns();
	hdr->max_frame = tb_ring_max_frame(cfg->ring_size);
	hdr->chunk = (uint32_t)tb_ring_chunk(cfg->ring_size);
	snprintf(hdr->name, sizeof(hdr->name), "%s", cfg->name);
	tb_ring_init_shared(&w->tx.ring, (uint8_t *)hdr + TB_SHM_HDR_SIZE,
			    cfg->ring_size, cfg->id, &hdr->lap);
	tb_atomic_store_relaxed(&hdr->heartbeat_ns, hdr->start_ns);
	tb_atomic_store_relaxed(&hdr->beat_seq, 0);
	tb_atomic_store_relaxed(&hdr->state, TB_SHM_OPEN);
	tb_atomic_store_release(&hdr->version, TB_SHM_VERSION); /* last: R2 */

	if (sibling(w->mem.path, path, w->path, sizeof(w->path)) < 0) {
		rc = tb_error_set(TB_EINVAL, "shm: path %s is too long", path);
		goto fail;
	}
	if (strcmp(w->path, path) != 0 &&
	    (rc = check_path(w->path, liveness_ns, &own_ring)) < 0)
		goto fail;
	if (own_ring)
		mark_replaced(w->path);
	if (rename(w->mem.path, w->path) != 0) {
		int e = errno;

		rc = tb_error_sys(e, "shm: rename %s to %s", w->mem.path, w->path);
		if (e == EPERM || e == EACCES)
			rc = tb_error_set(rc, "shm: %s belongs to another user and "
					  "this publisher may not replace it; "
					  "remove it or use another shm_path",
					  w->path);
		goto fail;
	}
	w->hdr = hdr;
	w->tx.ops = &tb_shm_tx_ops;
	return 0;
fail:
	unlink(w->mem.path);
	tb_mem_free(&w->mem);
	return rc;
}

void tb_shm_writer_beat(tb_shm_writer_t *w, uint64_t now_ns, uint64_t last_seq)
{
	/* Relaxed, unpaired: readers take both as hints, a beat apart. */
	tb_atomic_store_relaxed(&w->hdr->beat_seq, last_seq);
	tb_atomic_store_relaxed(&w->hdr->heartbeat_ns, now_ns);
}

void tb_shm_writer_close(tb_shm_writer_t *w, uint64_t final_seq, int unlink_it)
{
	tb_ring_lap_t *l;
	uint64_t g;

	if (!w->hdr)
		return;
	/* A last mark at the tail: a reader that lost its way finds the end
	 * of the stream (W2 / R2, as in tb_ring_announce). */
	l = &w->hdr->lap;
	g = tb_atomic_load_relaxed(&l->gen);
	tb_atomic_store_relaxed(&l->gen, g + 1);
	tb_atomic_fence_release();
	tb_atomic_store_relaxed(&l->mark_pos, w->tx.ring.tail);
	tb_atomic_store_relaxed(&l->mark_seq, final_seq + 1);
	tb_atomic_store_release(&l->gen, g + 2);
	tb_atomic_store_relaxed(&w->hdr->final_seq, final_seq);
	tb_atomic_store_release(&w->hdr->state, TB_SHM_CLOSED); /* R3 */
	tb_mem_free(&w->mem);
	if (unlink_it)
		unlink(w->path);
	w->hdr = NULL;
}

/* ------------------------------------------------------------------ reader */

static void set_slow(tb_shm_reader_t *r)
{
	r->slow = r->state != TB_SHM_R_ATTACHED || r->desync;
}

static void reader_unmap(tb_shm_reader_t *r)
{
	if (r->hdr)
		munmap((void *)r->hdr, r->map_len);
	r->hdr = NULL;
	r->ring = NULL;
	r->lap = NULL;
}

static void count(tb_shm_reader_t *r, tb_counter_id_t id)
{
	if (r->rx.ctr) {
		tb_counter_inc(r->rx.ctr, TB_CTR_MALFORMED);
		tb_counter_inc(r->rx.ctr, id);
	}
}

/* The writer's newest mark, both fields from one announcement.  0, or -1
 * when the writer keeps it changing (or died changing it). */
static int read_mark(const tb_ring_lap_t *l, uint64_t *pos, uint64_t *seq)
{
	for (int i = 0; i < MARK_TRIES; i++) {
		uint64_t g = tb_atomic_load_acquire(&l->gen); /* A2 pairs with R2 */

		if (g & 1) {
			tb_cpu_relax();
			continue;
		}
		*pos = tb_atomic_load_relaxed(&l->mark_pos);
		*seq = tb_atomic_load_relaxed(&l->mark_seq);
		tb_atomic_fence_acquire(); /* the marks before the re-check */
		if (tb_atomic_load_relaxed(&l->gen) == g)
			return 0;
	}
	return -1;
}

/* 1 if the writer may have overwritten what lies at `pos`: intent more
 * than a ring past it.  After a copy or read of that place (A0 pairs
 * with R0 in tb_ring_announce).  A position past intent (where a reader
 * that lost its way may stand) is not lapped. */
static int lapped_at(const tb_shm_reader_t *r, uint64_t pos)
{
	tb_atomic_fence_acquire();
	return (int64_t)(tb_atomic_load_relaxed(&r->lap->intent) - pos) >
	       (int64_t)(r->mask + 1);
}

/* The sequence word at pos (A1 pairs with R1 in tb_ring_commit). */
static uint64_t word_at(const tb_shm_reader_t *r, uint64_t pos)
{
	const tb_frame_hdr_t *f =
		(const tb_frame_hdr_t *)(r->ring + (pos & r->mask));

	return tb_atomic_plain_load_acquire(&f->seq);
}

/*
 * Finds the live end: from the newest mark, over the committed frames, the
 * first position whose frame is not whole yet, and the sequence it will
 * carry.  A walk that has not reached it within two chunks (a writer that
 * runs ahead) stops where it is: any frame boundary it has checked will do.
 * It also stops at a frame the writer could not have written; the poll
 * then meets it.  0, or -1 when the writer lapped every attempt or no
 * consistent mark could be read.
 */
static int live_end(const tb_shm_reader_t *r, uint64_t *pos_out,
		    uint64_t *seq_out)
{
	const uint64_t size = r->mask + 1;
	const uint64_t budget = 2 * r->hdr->chunk + r->max_space;

	for (int t = 0; t < WALK_TRIES; t++) {
		uint64_t pos, seq, from;
		int ok = 1;

		if (read_mark(r->lap, &pos, &seq) < 0)
			return -1;
		from = pos;
		while (pos - from < budget) {
			const tb_frame_hdr_t *f =
				(const tb_frame_hdr_t *)(r->ring + (pos & r->mask));
			/* A1 pairs with R1 in tb_ring_commit. */
			uint64_t s = tb_atomic_plain_load_acquire(&f->seq);
			uint64_t off = pos & r->mask;
			uint32_t len, space;
			uint8_t type, version;

			if (s != seq)
				break; /* the end (0), or the poll's concern */
			len = f->length;
			type = f->type;
			version = f->version;
			if (lapped_at(r, pos)) {
				ok = 0;
				break;
			}
			space = tb_frame_space(len);
			if (version != TB_FRAME_VERSION || len < TB_FRAME_HDR_LEN ||
			    space > r->max_space || off + space > size ||
			    (type == TB_FRAME_PAD && off + space != size) ||
			    (type != TB_FRAME_PAD && type != TB_FRAME_DATA))
				break;
			pos += space;
			if (type == TB_FRAME_DATA)
				seq++;
		}
		if (ok && !lapped_at(r, pos)) {
			*pos_out = pos;
			*seq_out = seq;
			return 0;
		}
	}
	return -1;
}

/*
 * Goes on from the live end (a lapped reader: what it missed is gone or
 * about to be, so it joins the writer where it is), or from the newest
 * mark (a reader that lost its way in frames still there: it loses no more
 * than it must); reports what the tracker lost on the way as `code`
 * (TB_LAPPED, TB_GAP) with the exact range, or returns 0 when it lost
 * nothing the tracker expected.  With no place to be had, the reader waits
 * for one (desync) and returns 0.
 */
static int resync(tb_shm_reader_t *r, tb_seq_t *seq, tb_seq_range_t *loss,
		  int code, int at_mark)
{
	uint64_t pos, s;

	if (at_mark ? read_mark(r->lap, &pos, &s) < 0 || lapped_at(r, pos)
		    : live_end(r, &pos, &s) < 0) {
		r->desync = 1;
		set_slow(r);
		return 0;
	}
	r->pos = pos;
	r->next = s;
	r->desync = 0;
	r->suspect = 0;
	set_slow(r);
	if (seq->expected != 0 && s > seq->expected) {
		tb_seq_gap_to(seq, s, loss);
		return code;
	}
	return 0;
}

/* The newest mark lies past pos (and within a ring of it). */
static int mark_ahead(const tb_shm_reader_t *r)
{
	uint64_t pos, s;

	return read_mark(r->lap, &pos, &s) == 0 &&
	       (int64_t)(pos - r->pos) > 0 && pos - r->pos <= r->mask + 1;
}

/*
 * The frame at pos carries a sequence the single writer could not have put
 * there, or a broken header, and the reader was not lapped: corruption.
 * Goes on past the frame when its header is otherwise sound (reporting its
 * sequence, which it does not deliver), unless the last such step was not
 * confirmed by a good frame; else from a newer mark; else waits for one.
 */
static int corrupt(tb_shm_reader_t *r, tb_seq_t *seq, tb_seq_range_t *loss)
{
	const uint64_t size = r->mask + 1, off = r->pos & r->mask;
	const tb_frame_hdr_t *f = (const tb_frame_hdr_t *)(r->ring + off);
	tb_frame_hdr_t h;
	uint32_t space;

	memcpy(&h, f, sizeof(h));
	if (lapped_at(r, r->pos))
		return resync(r, seq, loss, TB_LAPPED, 0);
	count(r, h.seq != r->next ? TB_CTR_MALFORMED_BAD_SEQ :
				    TB_CTR_MALFORMED_BAD_FRAME);
	space = tb_frame_space(h.length);
	if (r->pos != r->skipped && h.version == TB_FRAME_VERSION &&
	    h.stream_id == r->stream_id && h.length >= TB_FRAME_HDR_LEN &&
	    space <= r->max_space && off + space <= size) {
		if (h.type == TB_FRAME_PAD && off + space == size) {
			r->pos += space; /* a pad: no message lost */
			r->skipped = r->pos;
			return 0;
		}
		if (h.type == TB_FRAME_DATA) {
			uint64_t lost = r->next;

			r->pos += space;
			r->next = lost + 1;
			r->skipped = r->pos;
			if (seq->expected != 0 && seq->expected <= lost) {
				tb_seq_gap_to(seq, lost + 1, loss);
				return TB_GAP;
			}
			return 0;
		}
	}
	if (mark_ahead(r))
		return resync(r, seq, loss, TB_GAP, 1);
	r->desync = 1;
	set_slow(r);
	return 0;
}

int tb_shm_reader_odd(tb_shm_reader_t *r, tb_seq_t *seq, tb_seq_range_t *loss,
		      tb_handler_t handler, void *clientd, int limit)
{
	for (int tries = 0; tries < 4; tries++) {
		int rc;

		if (lapped_at(r, r->pos)) {
			rc = resync(r, seq, loss, TB_LAPPED, 0);
		} else if (word_at(r, r->pos) == 0) {
			/* Nothing at pos, and pos past what the writer ever
			 * announced: this reader lost its way (a corrupt
			 * length).  Wait for a mark past it. */
			count(r, TB_CTR_MALFORMED_BAD_FRAME);
			r->desync = 1;
			set_slow(r);
			rc = 0;
		} else {
			rc = corrupt(r, seq, loss);
		}
		if (rc != 0 || r->slow)
			return rc;
		/* Nothing the tracker expected was lost: read on at once. */
		rc = tb_shm_reader_read(r, seq, loss, handler, clientd, limit);
		if (rc != TB_SHM_ODD_)
			return rc;
	}
	return 0;
}

int tb_shm_reader_slow(tb_shm_reader_t *r, tb_seq_t *seq, tb_seq_range_t *loss,
		       tb_handler_t handler, void *clientd, int limit)
{
	if (r->state != TB_SHM_R_ATTACHED)
		return tb_shm_reader_idle(r, seq, loss);
	if (r->desync) {
		/* Every poll: the mark is on a line the writer writes once
		 * a chunk, read from this reader's cache meanwhile. */
		int rc;

		if (lapped_at(r, r->pos))
			rc = resync(r, seq, loss, TB_LAPPED, 0);
		else if (mark_ahead(r))
			rc = resync(r, seq, loss, TB_GAP, 1);
		else
			return (++r->idle_polls & 255) ? 0 :
			       tb_shm_reader_idle(r, seq, loss);
		if (rc != 0 || r->desync)
			return rc;
	}
	set_slow(r);
	if (r->slow)
		return 0;
	return tb_shm_reader_poll(r, seq, loss, handler, clientd, limit);
}

int tb_shm_reader_open(tb_shm_reader_t *r, const tb_stream_cfg_t *cfg)
{
	int rc;

	memset(r, 0, sizeof(*r));
	if (tb_stream_cfg_shm_path(cfg, r->path, sizeof(r->path)) < 0)
		return tb_error_set(TB_EINVAL, "shm: stream '%s': shm_path too long",
				  cfg->name);
	rc = tb_shm_access_of(cfg, &r->access);
	if (rc < 0)
		return rc;
	r->stream_id = cfg->id;
	r->liveness_ns = (uint64_t)cfg->liveness_timeout_ms * 1000000ull;
	r->state = TB_SHM_R_WAITING;
	r->slow = 1;
	r->opened_ns = tb_clock_now_ns();
	rc = tb_shm_reader_attach(r, 0);
	if (rc < 0)
		return rc;
	if (r->state == TB_SHM_R_ATTACHED && !ring_live(r->hdr, r->liveness_ns)) {
		/* A ring left by a publisher that closed or died: wait for the
		 * next one as if there were none. */
		r->state = TB_SHM_R_WAITING;
		r->epoch = 0;
	}
	set_slow(r);
	return 0;
}

int tb_shm_reader_attach(tb_shm_reader_t *r, int from_start)
{
	char where[TB_PATH_MAX];
	const tb_shm_hdr_t *hdr;
	struct stat st;
	uint8_t *scratch;
	uint32_t max_space;
	uint64_t pos = 0, next = 1;
	size_t len;
	void *base;
	int fd, rc;

	if (tb_mem_shared_locate(r->path, where, sizeof(where)) < 0)
		return tb_error_prepend(TB_EINVAL, "shm");
	fd = open(where, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0) {
		if (errno == ENOENT)
			return 0;
		if (errno == ELOOP)
			return tb_error_set(TB_EFORMAT, "shm: %s is a symbolic "
					  "link, not a tickbus ring; remove it "
					  "or fix shm_path", where);
		return tb_error_sys(errno, "shm: open %s", where);
	}
	if (fstat(fd, &st) != 0) {
		int e = errno;
		close(fd);
		return tb_error_sys(e, "shm: stat %s", r->path);
	}
	if (r->hdr && st.st_dev == r->dev && st.st_ino == r->ino) {
		close(fd);
		return 0; /* the same ring as before */
	}
	if ((rc = check_trusted(&st, &r->access, where)) < 0) {
		close(fd);
		return rc;
	}
	if ((size_t)st.st_size < TB_SHM_HDR_SIZE) {
		close(fd);
		return tb_error_set(TB_EFORMAT, "shm: %s holds %lld bytes, less "
				  "than a ring header: not a tickbus ring; "
				  "remove it or fix shm_path", where,
				  (long long)st.st_size);
	}
	/* Populated now, at attach: otherwise the reader takes a page fault
	 * on the first read of every page of the ring, on the hot path. */
	base = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED | MAP_POPULATE,
		    fd, 0);
	close(fd);
	if (base == MAP_FAILED)
		return tb_error_sys(errno, "shm: map %s", r->path);
	hdr = base;
	len = (size_t)st.st_size;
	if (tb_atomic_load_acquire(&hdr->version) != TB_SHM_VERSION || /* A2 pairs with R2 */
	    hdr->magic != TB_SHM_MAGIC || hdr->hdr_size != TB_SHM_HDR_SIZE ||
	    !tb_ring_size_ok(hdr->ring_size) ||
	    len < TB_SHM_HDR_SIZE + hdr->ring_size || /* hugetlbfs rounds up */
	    hdr->max_frame != tb_ring_max_frame(hdr->ring_size) ||
	    hdr->chunk != tb_ring_chunk(hdr->ring_size) ||
	    hdr->stream_id != r->stream_id) {
		uint32_t v = tb_atomic_load_relaxed(&hdr->version);
		int code = tb_error_set(TB_EFORMAT, "shm: %s is not a tickbus ring "
				      "of stream %u (format version %u, this "
				      "reader reads %u); remove it or fix "
				      "shm_path", r->path, r->stream_id, v,
				      TB_SHM_VERSION);
		munmap(base, len);
		return code;
	}
	max_space = tb_frame_space(hdr->max_frame);
	scratch = r->scratch;
	if (!scratch || r->max_space != max_space) {
		scratch = aligned_alloc(TB_CACHE_LINE, max_space);
		if (!scratch) {
			munmap(base, len);
			return tb_error_set(TB_ENOMEM, "shm: no memory for a %u-byte "
					  "frame buffer", max_space);
		}
		free(r->scratch);
	}
	reader_unmap(r);
	r->scratch = scratch;
	r->max_space = max_space;
	r->max_body = max_space - TB_FRAME_HDR_LEN;
	r->max_frame = hdr->max_frame;
	r->hdr = hdr;
	r->ring = (const uint8_t *)base + TB_SHM_HDR_SIZE;
	r->lap = &hdr->lap;
	r->mask = hdr->ring_size - 1;
	r->map_len = len;
	r->dev = st.st_dev;
	r->ino = st.st_ino;
	if (!from_start && live_end(r, &pos, &next) < 0) {
		/* A writer stopped half way through an announcement: no
		 * boundary to join at.  Its liveness says the rest. */
		pos = 0;
		next = 1;
		r->desync = 1;
	} else {
		r->desync = 0;
	}
	r->pos = pos;
	r->next = next;
	r->skipped = 0;
	r->suspect = 0;
	r->idle_polls = 0;
	r->state = TB_SHM_R_ATTACHED;
	set_slow(r);
	if (r->epoch == hdr->epoch)
		return 0;
	r->epoch = hdr->epoch;
	return 1;
}

void tb_shm_reader_close(tb_shm_reader_t *r)
{
	reader_unmap(r);
	free(r->scratch);
	r->scratch = NULL;
}

/* Starts a new epoch: sequence numbers from 1, the ring from its start. */
static int enter_epoch(tb_seq_t *seq, int attached)
{
	if (attached <= 0)
		return attached;
	tb_seq_init(seq, 1);
	return TB_NEW_EPOCH;
}

/* The last sequence the writer says it has published. */
static uint64_t said_published(const tb_shm_hdr_t *hdr, uint32_t state)
{
	return state == TB_SHM_OPEN ? tb_atomic_load_relaxed(&hdr->beat_seq)
				    : tb_atomic_load_relaxed(&hdr->final_seq);
}

int tb_shm_reader_idle(tb_shm_reader_t *r, tb_seq_t *seq, tb_seq_range_t *loss)
{
	uint64_t now_ns = tb_clock_now_ns(), said;
	const tb_shm_hdr_t *hdr;
	uint32_t state;
	int rc;

	if (now_ns - r->last_check_ns < TB_SHM_CHECK_NS)
		return r->state == TB_SHM_R_WAITING ? TB_NOT_CONNECTED : 0;
	r->last_check_ns = now_ns;

	switch (r->state) {
	case TB_SHM_R_WAITING:
		/* No ring yet: whatever appears is read from its first frame. */
		rc = tb_shm_reader_attach(r, 1);
		if (rc < 0)
			return rc;
		if (r->state != TB_SHM_R_ATTACHED)
			return TB_NOT_CONNECTED;
		if (r->hdr->start_ns < r->opened_ns &&
		    !ring_live(r->hdr, r->liveness_ns)) {
			r->state = TB_SHM_R_WAITING;
			r->epoch = 0;
			set_slow(r);
			return TB_NOT_CONNECTED;
		}
		tb_seq_init(seq, 1);
		return 0;
	case TB_SHM_R_ENDED:
		hdr = r->hdr;
		if (tb_atomic_load_acquire(&hdr->state) == TB_SHM_OPEN && /* A3 */
		    !beat_stale(hdr, now_ns, r->liveness_ns)) {
			/* Declared dead but beating again: it was starved. */
			r->state = TB_SHM_R_ATTACHED;
			set_slow(r);
			return 0;
		}
		return enter_epoch(seq, tb_shm_reader_attach(r, 1));
	case TB_SHM_R_ATTACHED:
		break;
	}

	/* Attached and idle for a while: has the writer gone or moved on? */
	hdr = r->hdr;
	state = tb_atomic_load_acquire(&hdr->state); /* A3 pairs with R3 */
	said = said_published(hdr, state);
	if (!r->desync) {
		if (word_at(r, r->pos) != 0)
			return 0; /* frames arrived: read them first */
		/* The writer says it published `next`, twice a check apart,
		 * yet pos holds nothing: this reader lost the frame
		 * boundaries (after a corrupt length).  Resynchronise. */
		if (said < r->next) {
			r->suspect = 0;
		} else if (r->suspect != r->next) {
			r->suspect = r->next;
		} else {
			count(r, TB_CTR_MALFORMED_BAD_FRAME);
			r->desync = 1;
			set_slow(r);
		}
	}
	if (r->desync && seq->expected != 0 && said >= seq->expected) {
		/* Lost the way and the writer went on: report what it says
		 * it published; a later resynchronisation reports the rest
		 * and skips what was reported here. */
		tb_seq_gap_to(seq, said + 1, loss);
		if (r->next <= said)
			r->next = said + 1;
		return TB_GAP;
	}
	if (state == TB_SHM_REPLACED) {
		ino_t was = r->ino;

		rc = enter_epoch(seq, tb_shm_reader_attach(r, 1));
		if (rc != 0)
			return rc;
		if (r->ino != was)
			return 0; /* a new ring in the same epoch: the same
				     stream goes on (tb_publisher_open_epoch) */
		r->state = TB_SHM_R_ENDED;
		set_slow(r);
		return TB_CLOSED;
	}
	if (state == TB_SHM_CLOSED) {
		r->state = TB_SHM_R_ENDED;
		set_slow(r);
		return TB_CLOSED;
	}
	if (beat_stale(hdr, now_ns, r->liveness_ns)) {
		r->state = TB_SHM_R_ENDED;
		set_slow(r);
		return TB_PUBLISHER_DEAD;
	}
	return 0;
}

/* ------------------------------------------------------ transport ops */

static int shm_tx_open(tb_tx_t **out, const tb_stream_cfg_t *cfg, uint64_t epoch)
{
	tb_shm_writer_t *w = calloc(1, sizeof(*w));
	int rc;

	if (!w)
		return tb_error_set(TB_ENOMEM, "shm: out of memory");
	rc = tb_shm_writer_open(w, cfg, epoch);
	if (rc < 0) {
		free(w);
		return rc;
	}
	*out = &w->tx;
	return 0;
}

static void shm_tx_beat(tb_tx_t *tx, uint64_t now_ns, uint64_t last_seq)
{
	tb_shm_writer_beat((tb_shm_writer_t *)tx, now_ns, last_seq);
}

static void shm_tx_close(tb_tx_t *tx, uint64_t final_seq)
{
	tb_shm_writer_close((tb_shm_writer_t *)tx, final_seq, 0);
	free(tx);
}

/* Committing into the shared ring is publishing: no room check (the writer
 * never waits for readers) and nothing to send. */
const tb_tx_ops_t tb_shm_tx_ops = {
	.name = "shm",
	.open = shm_tx_open,
	.room = NULL,
	.send = NULL,
	.flush = NULL,
	.beat = shm_tx_beat,
	.close = shm_tx_close,
};

static int shm_rx_open(tb_rx_t **out, const tb_stream_cfg_t *cfg)
{
	tb_shm_reader_t *r = calloc(1, sizeof(*r));
	int rc;

	if (!r)
		return tb_error_set(TB_ENOMEM, "shm: out of memory");
	rc = tb_shm_reader_open(r, cfg);
	if (rc < 0) {
		tb_shm_reader_close(r);
		free(r);
		return rc;
	}
	r->rx.ops = &tb_shm_rx_ops;
	*out = &r->rx;
	return 0;
}

static int shm_rx_poll(tb_rx_t *rx, tb_seq_t *seq, tb_seq_range_t *loss,
		       tb_handler_t handler, void *clientd, int limit)
{
	return tb_shm_reader_poll((tb_shm_reader_t *)rx, seq, loss, handler,
				  clientd, limit);
}

static uint64_t shm_rx_epoch(const tb_rx_t *rx)
{
	return ((const tb_shm_reader_t *)rx)->epoch;
}

static void shm_rx_close(tb_rx_t *rx)
{
	tb_shm_reader_close((tb_shm_reader_t *)rx);
	free(rx);
}

const tb_rx_ops_t tb_shm_rx_ops = {
	.name = "shm",
	.open = shm_rx_open,
	.poll = shm_rx_poll,
	.epoch = shm_rx_epoch,
	.close = shm_rx_close,
};
