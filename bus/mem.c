/*
 * mem.c - ring memory: huge pages, NUMA placement, locked and pre-faulted.
 *
 * A ring is polled millions of times a second by one pinned core.  Three
 * things decide what each of those polls costs beyond the cache: the TLB
 * (a 4 MiB ring is 1024 4 KiB pages but two 2 MiB pages), the NUMA distance
 * between the polling core and the memory, and page faults.  So every ring
 * gets, in this order of preference:
 *
 *   1. hugetlb 2 MiB pages.  Private memory: mmap(MAP_HUGETLB|MAP_HUGE_2MB).
 *      Shared memory: a file on a hugetlbfs mount (shm rings are files, and
 *      /dev/shm is tmpfs, which cannot give hugetlb pages).  This fails
 *      unless the administrator reserved pages (vm.nr_hugepages).
 *   2. transparent huge pages: a 2 MiB-aligned mapping with
 *      madvise(MADV_HUGEPAGE).  Counted only when the kernel's THP mode lets
 *      madvise work (transparent_hugepage/enabled for private memory,
 *      shmem_enabled for tmpfs files); the kernel may still hand out 4 KiB
 *      pages when memory is fragmented, so THP is "requested", not promised.
 *   3. 4 KiB pages.
 *
 * The memory is then bound to the polling core's node with
 * mbind(MPOL_PREFERRED) - preferred, not strict, so that a full node means a
 * remote page rather than an OOM kill - before it is touched, so the first
 * touch allocates it there.  It is mlock()ed (a failure is a warning: a
 * locked ring is better, an unlocked one still works) and every page is
 * touched, so no fault is left for the hot path: private pages are written
 * (a read would only map the shared zero page), shared pages are read (a read
 * fault on tmpfs or hugetlbfs allocates the page, and writing would race with
 * a peer that already uses the file).
 *
 * Nothing here runs on the hot path.
 */
#include "bus/mem.h"

#include "bus/error.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <numa.h>
#include <numaif.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#ifndef MAP_HUGE_2MB
#define MAP_HUGE_2MB (21 << MAP_HUGE_SHIFT)
#endif

#define THP_SYSFS "/sys/kernel/mm/transparent_hugepage/"

static const char *const kind_names[] = { "4k", "thp", "2M-hugetlb" };

const char *tb_mem_page_kind_name(tb_page_kind_t kind)
{
	return (unsigned)kind < 3 ? kind_names[kind] : "unknown";
}

static size_t page_size(void)
{
	long p = sysconf(_SC_PAGESIZE);

	return p > 0 ? (size_t)p : 4096;
}

/* Rounds `n` up to a multiple of `align` (a power of two); 0 on overflow. */
static size_t round_up(size_t n, size_t align)
{
	if (n > SIZE_MAX - (align - 1))
		return 0;
	return (n + align - 1) & ~(align - 1);
}

/* The bracketed word of a sysfs THP mode file: "always [madvise] never". */
static int thp_mode_allows_madvise(const char *file)
{
	char buf[256], *open, *close;
	FILE *f = fopen(file, "r");
	int ok = 0;

	if (!f)
		return 0;
	if (fgets(buf, sizeof(buf), f) && (open = strchr(buf, '[')) &&
	    (close = strchr(open, ']'))) {
		*close = '\0';
		open++;
		ok = strcmp(open, "never") != 0 && strcmp(open, "deny") != 0;
	}
	fclose(f);
	return ok;
}

int tb_mem_node_of_core(int core)
{
	if (core < 0 || numa_available() < 0)
		return -1;
	return numa_node_of_cpu(core);
}

/* Checks `node` (-1 allowed); returns 0 or TB_EINVAL. */
static int check_node(int node)
{
	if (node < -1)
		return tb_error_set(TB_EINVAL, "mem: NUMA node %d is negative",
				  node);
	if (node >= 0 && numa_available() >= 0 && node > numa_max_node())
		return tb_error_set(TB_EINVAL, "mem: NUMA node %d does not "
				  "exist (highest is %d)", node,
				  numa_max_node());
	return 0;
}

/* Preferred placement on `node` (-1: this CPU's node), before first touch. */
static void place(void *addr, size_t len, int node)
{
	/* 1024 nodes is libnuma's own NUMA_NUM_NODES on x86-64. */
	unsigned long mask[1024 / (8 * sizeof(unsigned long))];
	const size_t bits = 8 * sizeof(unsigned long);

	if (numa_available() < 0) {
		tb_info("mem: no NUMA support here; memory not placed");
		return;
	}
	if (node < 0) {
		int cpu = sched_getcpu();

		node = cpu >= 0 ? numa_node_of_cpu(cpu) : -1;
		if (node < 0)
			return;
	}
	if ((size_t)node >= sizeof(mask) * 8)
		return;
	memset(mask, 0, sizeof(mask));
	mask[node / bits] |= 1ul << (node % bits);
	if (mbind(addr, len, MPOL_PREFERRED, mask, sizeof(mask) * 8 + 1, 0) !=
	    0)
		tb_warn("mem: mbind to NUMA node %d failed: %s; memory goes "
			"where it is first touched", node, strerror(errno));
}

/* Node of the page at `addr`, or -1. */
static int node_of(void *addr)
{
	int node = -1;

	if (numa_available() < 0 ||
	    get_mempolicy(&node, NULL, 0, addr, MPOL_F_NODE | MPOL_F_ADDR) != 0)
		return -1;
	return node;
}

static void lock_memory(tb_mem_t *m, unsigned flags)
{
	if (flags & TB_MEM_NO_MLOCK)
		return;
	if (mlock(m->addr, m->size) == 0) {
		m->locked = 1;
		return;
	}
	tb_warn("mem: mlock of %zu bytes failed (%s): the memory may be "
		"swapped out. Raise the locked-memory limit: `ulimit -l "
		"unlimited`, memlock in /etc/security/limits.conf, or "
		"LimitMEMLOCK=infinity for a systemd service",
		m->size, strerror(errno));
}

static void prefault(tb_mem_t *m, int write)
{
	size_t step = page_size();
	/* volatile only so that the compiler keeps every touch; nothing
	 * synchronises through it: it only brings the pages in. */
	volatile char *p = m->addr;
	char sink = 0;

	/* Per 4 KiB even for THP: the kernel may have fallen back to small
	 * pages for part of the range. */
	for (size_t off = 0; off < m->size; off += step) {
		if (write)
			p[off] = 0;
		else
			sink ^= p[off];
	}
	(void)sink;
}

/* mmap of `len` bytes aligned to `align`: reserve len + align, map inside,
 * trim the ends. */
static void *map_aligned(size_t len, size_t align, int prot, int flags, int fd)
{
	size_t span = len + align, head, tail;
	char *r, *a;

	if (align <= page_size())
		return mmap(NULL, len, prot, flags, fd, 0);
	r = mmap(NULL, span, PROT_NONE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (r == MAP_FAILED)
		return MAP_FAILED;
	a = (char *)(((uintptr_t)r + align - 1) & ~(uintptr_t)(align - 1));
	if (mmap(a, len, prot, flags | MAP_FIXED, fd, 0) == MAP_FAILED) {
		int e = errno;

		munmap(r, span);
		errno = e;
		return MAP_FAILED;
	}
	head = (size_t)(a - r);
	tail = span - head - len;
	if (head)
		munmap(r, head);
	if (tail)
		munmap(a + len, tail);
	return a;
}

static void finish(tb_mem_t *m, int write_touch, unsigned flags)
{
	lock_memory(m, flags);
	prefault(m, write_touch);
	m->numa_node = node_of(m->addr);
	tb_info("mem: %s: %zu bytes on %s pages, NUMA node %d, %s",
		m->shared ? m->path : "private memory", m->size,
		tb_mem_page_kind_name(m->page_kind), m->numa_node,
		m->locked ? "locked" : "not locked");
}

int tb_mem_alloc(tb_mem_t *m, size_t size, int numa_node, unsigned flags)
{
	const int prot = PROT_READ | PROT_WRITE;
	const int mflags = MAP_PRIVATE | MAP_ANONYMOUS;
	size_t len;
	void *p;
	int rc;

	if (!m)
		return tb_error_set(TB_EINVAL, "mem: alloc: m is NULL");
	memset(m, 0, sizeof(*m));
	m->numa_node = -1;
	if (size == 0 || size > SIZE_MAX / 2)
		return tb_error_set(TB_EINVAL, "mem: alloc: bad size %zu", size);
	if (flags & ~(TB_MEM_FLAGS_ALL & ~TB_MEM_READONLY))
		return tb_error_set(TB_EINVAL, "mem: alloc: unknown flags 0x%x",
				  flags);
	if ((rc = check_node(numa_node)) != 0)
		return rc;

	len = round_up(size, TB_MEM_HUGE_SIZE);
	if (!(flags & TB_MEM_NO_HUGETLB)) {
		p = mmap(NULL, len, prot, mflags | MAP_HUGETLB | MAP_HUGE_2MB,
			 -1, 0);
		if (p != MAP_FAILED) {
			m->page_kind = TB_PAGE_HUGE_2M;
			goto mapped;
		}
		tb_info("mem: no 2 MiB hugetlb pages for %zu bytes (%s); "
			"reserve some with sysctl vm.nr_hugepages", len,
			strerror(errno));
	}
	if (!(flags & TB_MEM_NO_THP) &&
	    thp_mode_allows_madvise(THP_SYSFS "enabled")) {
		p = map_aligned(len, TB_MEM_HUGE_SIZE, prot, mflags, -1);
		if (p == MAP_FAILED)
			return tb_error_sys(errno, "mem: mmap %zu bytes", len);
		if (madvise(p, len, MADV_HUGEPAGE) == 0) {
			m->page_kind = TB_PAGE_THP;
			goto mapped;
		}
		tb_info("mem: madvise(MADV_HUGEPAGE): %s", strerror(errno));
		munmap(p, len);
	}
	len = round_up(size, page_size());
	p = mmap(NULL, len, prot, mflags, -1, 0);
	if (p == MAP_FAILED)
		return tb_error_sys(errno, "mem: mmap %zu bytes", len);
	m->page_kind = TB_PAGE_4K;
mapped:
	m->addr = p;
	m->size = len;
	place(p, len, numa_node);
	finish(m, 1, flags);
	return 0;
}

/* ------------------------------------------------------------ shared */

/* The hugetlbfs directory to use, or NULL: $TICKBUS_HUGETLBFS_DIR, else the
 * first 2 MiB hugetlbfs mount in /proc/mounts.  Must really be hugetlbfs. */
static const char *hugetlbfs_dir(char *buf, size_t len)
{
	const char *env = getenv(TB_MEM_HUGETLBFS_ENV);
	struct statfs sfs;

	if (env) {
		if (!env[0])
			return NULL;
		snprintf(buf, len, "%s", env);
	} else {
		char dev[256], dir[256], type[64], opts[512];
		FILE *f = fopen("/proc/mounts", "r");
		int found = 0;

		if (!f)
			return NULL;
		while (!found && fscanf(f, "%255s %255s %63s %511s %*d %*d",
					dev, dir, type, opts) == 4)
			found = strcmp(type, "hugetlbfs") == 0 &&
				(strstr(opts, "pagesize=2M") ||
				 !strstr(opts, "pagesize="));
		fclose(f);
		if (!found)
			return NULL;
		snprintf(buf, len, "%s", dir);
	}
	if (statfs(buf, &sfs) != 0 || (unsigned long)sfs.f_type !=
					      (unsigned long)HUGETLBFS_MAGIC) {
		tb_info("mem: %s is not a hugetlbfs mount; ignored", buf);
		return NULL;
	}
	return buf;
}

/* <hugetlbfs dir>/<basename of path>, or 0 when there is no mount. */
static int huge_path(const char *path, char *out, size_t len)
{
	char dir[TB_PATH_MAX];
	const char *base = strrchr(path, '/');
	int n;

	if (!hugetlbfs_dir(dir, sizeof(dir)))
		return 0;
	base = base ? base + 1 : path;
	n = snprintf(out, len, "%s/%s", dir, base);
	return n > 0 && (size_t)n < len;
}

int tb_mem_shared_locate(const char *path, char *out, size_t len)
{
	int n;

	if (huge_path(path, out, len) && access(out, F_OK) == 0)
		return 0;
	n = snprintf(out, len, "%s", path);
	return n >= 0 && (size_t)n < len ? 0 :
	       tb_error_set(TB_EINVAL, "mem: path %s is too long", path);
}

/* Maps the open file `fd` of `len` bytes as `kind`; 0 or a TB_E* code. */
static int map_file(tb_mem_t *m, int fd, size_t len, tb_page_kind_t kind,
		    int prot)
{
	size_t align = kind == TB_PAGE_4K ? page_size() : TB_MEM_HUGE_SIZE;
	void *p;

	p = kind == TB_PAGE_HUGE_2M
		    ? mmap(NULL, len, prot, MAP_SHARED, fd, 0)
		    : map_aligned(len, align, prot, MAP_SHARED, fd);
	if (p == MAP_FAILED)
		return tb_error_sys(errno, "mem: mmap %s (%zu bytes)", m->path,
				  len);
	if (kind == TB_PAGE_THP && madvise(p, len, MADV_HUGEPAGE) != 0) {
		tb_info("mem: madvise(MADV_HUGEPAGE) on %s: %s", m->path,
			strerror(errno));
		kind = TB_PAGE_4K;
	}
	m->addr = p;
	m->size = len;
	m->page_kind = kind;
	return 0;
}

/*
 * Creates `path` as a new file (O_EXCL | O_NOFOLLOW: never a file or a link
 * someone else put there) with exactly `mode` whatever the umask, in
 * `group` unless that is (gid_t)-1.  The fd, or -1 with a message:
 * TB_EBUSY when something is at the path already.
 */
static int create_file(const char *path, mode_t mode, gid_t group, int *code)
{
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
		      mode);

	if (fd < 0) {
		*code = errno == EEXIST ?
			tb_error_set(TB_EBUSY, "mem: create %s: something is "
				   "there already; not reusing it", path) :
			tb_error_sys(errno, "mem: create %s", path);
		return -1;
	}
	if (group != (gid_t)-1 && fchown(fd, (uid_t)-1, group) != 0) {
		*code = tb_error_sys(errno, "mem: give %s to group %u (is this "
				   "user a member?)", path, (unsigned)group);
		goto fail;
	}
	if (fchmod(fd, mode) != 0) {
		*code = tb_error_sys(errno, "mem: chmod %s to %04o", path,
				   (unsigned)mode);
		goto fail;
	}
	return fd;
fail:
	close(fd);
	unlink(path);
	return -1;
}

static int create_shared(tb_mem_t *m, const char *path, size_t size,
			 int numa_node, unsigned flags, mode_t mode, gid_t group)
{
	const int prot = PROT_READ | PROT_WRITE;
	char hpath[TB_PATH_MAX];
	tb_page_kind_t kind;
	size_t len;
	int fd, rc, have_huge = huge_path(path, hpath, sizeof(hpath));

	if (have_huge && !(flags & TB_MEM_NO_HUGETLB)) {
		len = round_up(size, TB_MEM_HUGE_SIZE);
		snprintf(m->path, sizeof(m->path), "%s", hpath);
		fd = create_file(hpath, mode, group, &rc);
		if (fd < 0)
			(void)rc; /* the message says it; 4K pages below */
		else if (ftruncate(fd, (off_t)len) != 0)
			tb_error_sys(errno, "mem: size %s", hpath);
		else if (map_file(m, fd, len, TB_PAGE_HUGE_2M, prot) == 0) {
			close(fd);
			unlink(path); /* no stale twin for openers */
			goto mapped;
		}
		if (fd >= 0) {
			close(fd);
			unlink(hpath);
		}
		tb_info("%s; using %s", tb_errmsg(), path);
		tb_error_clear();
	} else if (have_huge) {
		unlink(hpath); /* openers look there first */
	}

	kind = !(flags & TB_MEM_NO_THP) &&
			       thp_mode_allows_madvise(THP_SYSFS "shmem_enabled")
		       ? TB_PAGE_THP
		       : TB_PAGE_4K;
	len = round_up(size, kind == TB_PAGE_THP ? TB_MEM_HUGE_SIZE
						 : page_size());
	snprintf(m->path, sizeof(m->path), "%s", path);
	fd = create_file(path, mode, group, &rc);
	if (fd < 0)
		return rc;
	if (ftruncate(fd, (off_t)len) != 0) {
		rc = tb_error_sys(errno, "mem: size %s to %zu bytes", path, len);
		close(fd);
		unlink(path);
		return rc;
	}
	rc = map_file(m, fd, len, kind, prot);
	close(fd);
	if (rc != 0) {
		unlink(path);
		return rc;
	}
mapped:
	place(m->addr, m->size, numa_node);
	finish(m, 0, flags);
	return 0;
}

static int open_shared(tb_mem_t *m, const char *path, size_t size,
		       unsigned flags)
{
	const int ro = (flags & TB_MEM_READONLY) != 0;
	char hpath[TB_PATH_MAX];
	tb_page_kind_t kind = TB_PAGE_4K;
	struct stat st;
	size_t len;
	int fd = -1, rc;

	/* Never through a link, never waiting on a FIFO. */
	const int oflags = (ro ? O_RDONLY : O_RDWR) | O_CLOEXEC | O_NOFOLLOW |
			   O_NONBLOCK;

	if (huge_path(path, hpath, sizeof(hpath))) {
		fd = open(hpath, oflags);
		if (fd >= 0) {
			kind = TB_PAGE_HUGE_2M;
			snprintf(m->path, sizeof(m->path), "%s", hpath);
		}
	}
	if (fd < 0) {
		snprintf(m->path, sizeof(m->path), "%s", path);
		fd = open(path, oflags);
		if (fd < 0)
			return tb_error_sys(errno, "mem: open %s", path);
	}
	if (fstat(fd, &st) != 0) {
		rc = tb_error_sys(errno, "mem: stat %s", m->path);
		close(fd);
		return rc;
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return tb_error_set(TB_EINVAL, "mem: %s is not a regular file",
				  m->path);
	}
	if (st.st_size <= 0 || (size && (uint64_t)st.st_size < size)) {
		close(fd);
		return tb_error_set(TB_EINVAL, "mem: %s holds %lld bytes, "
				  "%zu wanted", m->path,
				  (long long)st.st_size, size);
	}
	len = size ? size : (size_t)st.st_size;
	if (kind != TB_PAGE_HUGE_2M && !(flags & TB_MEM_NO_THP) &&
	    (size_t)st.st_size % TB_MEM_HUGE_SIZE == 0 &&
	    thp_mode_allows_madvise(THP_SYSFS "shmem_enabled"))
		kind = TB_PAGE_THP;
	len = round_up(len, kind == TB_PAGE_4K ? page_size()
					       : TB_MEM_HUGE_SIZE);
	if (len > (uint64_t)st.st_size) {
		close(fd);
		return tb_error_set(TB_EINVAL, "mem: %s holds %lld bytes, not a "
				  "whole number of %s pages", m->path,
				  (long long)st.st_size,
				  tb_mem_page_kind_name(kind));
	}
	rc = map_file(m, fd, len, kind, ro ? PROT_READ : PROT_READ | PROT_WRITE);
	close(fd);
	if (rc != 0)
		return rc;
	finish(m, 0, flags);
	return 0;
}

static int map_shared(tb_mem_t *m, const char *path, size_t size, int create,
		      int numa_node, unsigned flags, mode_t mode, gid_t group)
{
	int rc;

	if (!m)
		return tb_error_set(TB_EINVAL, "mem: map_shared: m is NULL");
	memset(m, 0, sizeof(*m));
	m->numa_node = -1;
	m->shared = 1;
	if (!path || !path[0] || strlen(path) >= TB_PATH_MAX)
		return tb_error_set(TB_EINVAL, "mem: map_shared: path is "
				  "empty, NULL or longer than %d bytes",
				  TB_PATH_MAX - 1);
	if (flags & ~TB_MEM_FLAGS_ALL)
		return tb_error_set(TB_EINVAL, "mem: map_shared: unknown flags "
				  "0x%x", flags);
	if (size > SIZE_MAX / 2 || (create && size == 0))
		return tb_error_set(TB_EINVAL, "mem: map_shared %s: bad size "
				  "%zu", path, size);
	if (create && (flags & TB_MEM_READONLY))
		return tb_error_set(TB_EINVAL, "mem: map_shared %s: cannot "
				  "create read-only", path);
	if ((rc = check_node(numa_node)) != 0)
		return rc;
	if (create && (mode & ~(mode_t)0777))
		return tb_error_set(TB_EINVAL, "mem: map_shared %s: bad mode "
				  "%o", path, (unsigned)mode);
	rc = create ? create_shared(m, path, size, numa_node, flags, mode, group)
		    : open_shared(m, path, size, flags);
	if (rc != 0) {
		memset(m, 0, sizeof(*m));
		m->numa_node = -1;
	}
	return rc;
}

int tb_mem_map_shared(tb_mem_t *m, const char *path, size_t size, int create,
		      int numa_node, unsigned flags)
{
	return map_shared(m, path, size, create, numa_node, flags,
			  TB_MEM_SHARED_MODE, (gid_t)-1);
}

int tb_mem_create_shared(tb_mem_t *m, const char *path, size_t size,
			 int numa_node, unsigned flags, mode_t mode, gid_t group)
{
	return map_shared(m, path, size, 1, numa_node, flags, mode, group);
}

void tb_mem_free(tb_mem_t *m)
{
	if (!m)
		return;
	if (m->addr && m->size)
		munmap(m->addr, m->size);
	memset(m, 0, sizeof(*m));
	m->numa_node = -1;
}

int tb_mem_unlink_shared(const char *path)
{
	char hpath[TB_PATH_MAX];
	int removed = 0;

	if (!path || !path[0])
		return tb_error_set(TB_EINVAL, "mem: unlink: empty path");
	if (huge_path(path, hpath, sizeof(hpath)) && unlink(hpath) == 0)
		removed = 1;
	if (unlink(path) == 0)
		removed = 1;
	return removed ? 0 : tb_error_set(TB_ENOENT, "mem: unlink %s: no such "
					"file", path);
}
