/*
 * test_mem.c - ring memory: each page-size fallback, rounding, alignment,
 * pre-faulting, locking (and the warning when it fails), NUMA placement,
 * shared files across fork, bad arguments; shared files created new
 * (O_EXCL, O_NOFOLLOW) with exactly the mode asked, and opened without
 * following a link or waiting on a FIFO.
 *
 * What a path should give depends on the machine (reserved hugetlb pages,
 * the THP mode); the tests read the same sysfs/procfs facts and expect
 * accordingly.  Files go to /dev/shm/tbtest-mem-<pid>* and are removed.
 */
#include "bus/error.h"
#include "bus/mem.h"

#include <errno.h>
#include <numa.h>
#include <pwd.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#define MiB ((size_t)1 << 20)

static char shm_path[128];

static long meminfo(const char *key)
{
	char line[256];
	long v = -1;
	FILE *f = fopen("/proc/meminfo", "r");

	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, key, strlen(key)) == 0 &&
		    line[strlen(key)] == ':')
			v = strtol(line + strlen(key) + 1, NULL, 10);
	fclose(f);
	return v;
}

static int thp_allows(const char *file)
{
	char buf[256], path[256], *o;
	FILE *f;

	snprintf(path, sizeof(path), "/sys/kernel/mm/transparent_hugepage/%s",
		 file);
	f = fopen(path, "r");
	if (!f)
		return 0;
	buf[0] = '\0';
	if (!fgets(buf, sizeof(buf), f))
		buf[0] = '\0';
	fclose(f);
	o = strchr(buf, '[');
	return o && strncmp(o, "[never]", 7) != 0 &&
	       strncmp(o, "[deny]", 6) != 0;
}

/* The memory can be locked: root, or a limit above `size`. */
static int can_lock(size_t size)
{
	struct rlimit rl;

	if (geteuid() == 0)
		return 1;
	return getrlimit(RLIMIT_MEMLOCK, &rl) == 0 &&
	       (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= size * 2);
}

/* Every page of the mapping is resident: nothing left to fault. */
static void assert_resident(const tb_mem_t *m)
{
	size_t pages = m->size / 4096;
	unsigned char *vec = malloc(pages);

	assert_non_null(vec);
	assert_int_equal(mincore(m->addr, m->size, vec), 0);
	for (size_t i = 0; i < pages; i++)
		if (!(vec[i] & 1))
			fail_msg("page %zu of %zu not resident", i, pages);
	free(vec);
}

static void assert_usable(const tb_mem_t *m)
{
	unsigned char *p = m->addr;

	assert_non_null(p);
	assert_int_equal(p[0], 0);
	assert_int_equal(p[m->size - 1], 0);
	p[0] = 1;
	p[m->size - 1] = 2;
	assert_int_equal(p[0] + p[m->size - 1], 3);
}

static void check_kind(const tb_mem_t *m, size_t asked)
{
	printf("asked %zu: got %zu bytes on %s pages, node %d, %slocked\n",
	       asked, m->size, tb_mem_page_kind_name(m->page_kind),
	       m->numa_node, m->locked ? "" : "not ");
	if (m->page_kind == TB_PAGE_4K) {
		assert_int_equal(m->size, (asked + 4095) & ~(size_t)4095);
		assert_int_equal((uintptr_t)m->addr % 4096, 0);
	} else {
		assert_int_equal(m->size % TB_MEM_HUGE_SIZE, 0);
		assert_true(m->size >= asked);
		assert_true(m->size < asked + TB_MEM_HUGE_SIZE);
		assert_int_equal((uintptr_t)m->addr % TB_MEM_HUGE_SIZE, 0);
	}
}

static void test_default_order(void **state)
{
	(void)state;
	tb_mem_t m;
	tb_page_kind_t want;

	if (meminfo("HugePages_Free") >= 2)
		want = TB_PAGE_HUGE_2M;
	else if (thp_allows("enabled"))
		want = TB_PAGE_THP;
	else
		want = TB_PAGE_4K;
	assert_int_equal(tb_mem_alloc(&m, 3 * MiB, -1, 0), 0);
	check_kind(&m, 3 * MiB);
	assert_int_equal(m.page_kind, want);
	assert_int_equal(m.shared, 0);
	assert_resident(&m);
	assert_usable(&m);
	if (can_lock(m.size))
		assert_int_equal(m.locked, 1);
	tb_mem_free(&m);
	assert_null(m.addr);
}

static void test_no_hugetlb_gives_thp(void **state)
{
	(void)state;
	tb_mem_t m;

	assert_int_equal(tb_mem_alloc(&m, MiB + 1, -1, TB_MEM_NO_HUGETLB), 0);
	check_kind(&m, MiB + 1);
	assert_int_equal(m.page_kind,
			 thp_allows("enabled") ? TB_PAGE_THP : TB_PAGE_4K);
	assert_resident(&m);
	assert_usable(&m);
	tb_mem_free(&m);
}

static void test_4k_fallback_rounds_to_pages(void **state)
{
	(void)state;
	tb_mem_t m;

	assert_int_equal(tb_mem_alloc(&m, 5000, -1,
				      TB_MEM_NO_HUGETLB | TB_MEM_NO_THP),
			 0);
	assert_int_equal(m.page_kind, TB_PAGE_4K);
	assert_int_equal(m.size, 8192);
	check_kind(&m, 5000);
	assert_resident(&m);
	assert_usable(&m);
	tb_mem_free(&m);

	assert_int_equal(tb_mem_alloc(&m, 1, -1,
				      TB_MEM_NO_HUGETLB | TB_MEM_NO_THP),
			 0);
	assert_int_equal(m.size, 4096);
	tb_mem_free(&m);
}

static void test_no_mlock(void **state)
{
	(void)state;
	tb_mem_t m;

	assert_int_equal(tb_mem_alloc(&m, 4096, -1,
				      TB_MEM_NO_HUGETLB | TB_MEM_NO_THP |
					      TB_MEM_NO_MLOCK),
			 0);
	assert_int_equal(m.locked, 0);
	assert_resident(&m); /* pre-faulted all the same */
	tb_mem_free(&m);
}

/* With no right to lock memory, allocation still succeeds, with a warning
 * that says how to raise the limit. */
static void test_mlock_failure_is_a_warning(void **state)
{
	(void)state;
	char buf[1024];
	int fds[2], status;
	ssize_t n, got = 0;
	pid_t pid;

#if defined(__SANITIZE_ADDRESS__)
	/* ASan replaces mlock with a no-op that succeeds. */
	fprintf(stderr, "AddressSanitizer ignores mlock: nothing to test\n");
	skip();
#endif
	assert_int_equal(pipe(fds), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct rlimit zero = { 0, 0 };
		tb_mem_t m;

		dup2(fds[1], 2);
		close(fds[0]);
		close(fds[1]);
		unsetenv("TICKBUS_QUIET");
		if (geteuid() == 0 && setuid(65534) != 0) /* drop CAP_IPC_LOCK */
			_exit(10);
		if (setrlimit(RLIMIT_MEMLOCK, &zero) != 0)
			_exit(11);
		if (tb_mem_alloc(&m, 8192, -1,
				 TB_MEM_NO_HUGETLB | TB_MEM_NO_THP) != 0)
			_exit(12);
		if (m.locked)
			_exit(13);
		tb_mem_free(&m);
		_exit(0);
	}
	close(fds[1]);
	while ((n = read(fds[0], buf + got, sizeof(buf) - 1 - (size_t)got)) > 0)
		got += n;
	close(fds[0]);
	buf[got] = '\0';
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_non_null(strstr(buf, "mlock"));
	assert_non_null(strstr(buf, "ulimit -l"));
}

static void test_numa(void **state)
{
	(void)state;
	tb_mem_t m;

	assert_int_equal(tb_mem_node_of_core(-1), -1);
	if (numa_available() < 0) {
		/* Placement is skipped; the memory is still usable. */
		assert_int_equal(tb_mem_alloc(&m, 4096, 0, 0), 0);
		tb_mem_free(&m);
		skip();
		return;
	}
	assert_int_equal(tb_mem_node_of_core(0), numa_node_of_cpu(0));
	assert_int_equal(tb_mem_alloc(&m, 4096, 0,
				      TB_MEM_NO_HUGETLB | TB_MEM_NO_THP),
			 0);
	assert_int_equal(m.numa_node, 0);
	tb_mem_free(&m);
	assert_int_equal(tb_mem_alloc(&m, 4096, numa_max_node() + 1, 0),
			 TB_EINVAL);
	assert_non_null(strstr(tb_errmsg(), "does not exist"));
}

static void test_alloc_bad_args(void **state)
{
	(void)state;
	tb_mem_t m;

	assert_int_equal(tb_mem_alloc(NULL, 4096, -1, 0), TB_EINVAL);
	assert_int_equal(tb_mem_alloc(&m, 0, -1, 0), TB_EINVAL);
	assert_null(m.addr);
	assert_int_equal(tb_mem_alloc(&m, SIZE_MAX, -1, 0), TB_EINVAL);
	assert_int_equal(tb_mem_alloc(&m, SIZE_MAX / 2 + 1, -1, 0), TB_EINVAL);
	assert_int_equal(tb_mem_alloc(&m, 4096, -2, 0), TB_EINVAL);
	assert_int_equal(tb_mem_alloc(&m, 4096, -1, 0x100), TB_EINVAL);
	assert_int_equal(tb_mem_alloc(&m, 4096, -1, TB_MEM_READONLY),
			 TB_EINVAL);
	assert_non_null(strstr(tb_errmsg(), "flags"));
	/* Freeing a failed or zeroed tb_mem_t is harmless, twice. */
	tb_mem_free(&m);
	tb_mem_free(&m);
	tb_mem_free(NULL);
}

/* ---------------------------------------------------------------- shared */

static void test_shared_across_fork(void **state)
{
	(void)state;
	tb_mem_t m, ro;
	int status;
	pid_t pid;

	assert_int_equal(tb_mem_map_shared(&m, shm_path, 10000, 1, -1, 0), 0);
	check_kind(&m, 10000);
	assert_int_equal(m.page_kind, thp_allows("shmem_enabled")
					      ? TB_PAGE_THP
					      : TB_PAGE_4K);
	assert_int_equal(m.shared, 1);
	assert_string_equal(m.path, shm_path);
	assert_resident(&m);
	assert_usable(&m);
	memcpy(m.addr, "hello", 6);

	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		tb_mem_t c;
		char *p = m.addr;

		/* The child maps the file on its own, as another program. */
		if (tb_mem_map_shared(&c, shm_path, 0, 0, -1, 0) != 0)
			_exit(1);
		if (c.size != m.size || strcmp(c.addr, "hello") != 0)
			_exit(2);
		memcpy((char *)c.addr + 4096, "world", 6);
		memcpy(p + 8192, "inherited", 10); /* through fork's copy */
		tb_mem_free(&c);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_string_equal((char *)m.addr + 4096, "world");
	assert_string_equal((char *)m.addr + 8192, "inherited");

	/* A read-only view of part of it. */
	assert_int_equal(tb_mem_map_shared(&ro, shm_path, 4096, 0, -1,
					   TB_MEM_READONLY),
			 0);
	assert_string_equal(ro.addr, "hello");
	assert_true(ro.size >= 4096 && ro.size <= m.size);
	tb_mem_free(&ro);

	tb_mem_free(&m);
	assert_int_equal(tb_mem_unlink_shared(shm_path), 0);
	assert_int_equal(tb_mem_unlink_shared(shm_path), TB_ENOENT);
}

static void test_shared_4k_and_no_fake_hugetlbfs(void **state)
{
	(void)state;
	tb_mem_t m;

	/* /dev/shm is tmpfs, not hugetlbfs: ignored, the file stays put. */
	setenv(TB_MEM_HUGETLBFS_ENV, "/dev/shm", 1);
	assert_int_equal(tb_mem_map_shared(&m, shm_path, 5000, 1, -1,
					   TB_MEM_NO_THP),
			 0);
	unsetenv(TB_MEM_HUGETLBFS_ENV);
	assert_string_equal(m.path, shm_path);
	assert_int_equal(m.page_kind, TB_PAGE_4K);
	assert_int_equal(m.size, 8192);
	assert_resident(&m);
	tb_mem_free(&m);

	/* Creating over an existing file is refused: it is not ours to
	 * truncate.  Its content stays. */
	assert_int_equal(tb_mem_map_shared(&m, shm_path, 0, 0, -1, 0), 0);
	((char *)m.addr)[0] = 'x';
	tb_mem_free(&m);
	assert_int_equal(tb_mem_map_shared(&m, shm_path, 5000, 1, -1,
					   TB_MEM_NO_THP),
			 TB_EBUSY);
	assert_non_null(strstr(tb_errmsg(), shm_path));
	assert_int_equal(tb_mem_map_shared(&m, shm_path, 0, 0, -1, 0), 0);
	assert_int_equal(((char *)m.addr)[0], 'x');
	tb_mem_free(&m);
	assert_int_equal(tb_mem_unlink_shared(shm_path), 0);
}

/* A new shared file has exactly the mode asked, whatever the umask, and
 * the group asked. */
static void test_shared_mode_and_group(void **state)
{
	mode_t old = umask(0);
	struct stat st;
	tb_mem_t m;

	(void)state;
	assert_int_equal(tb_mem_map_shared(&m, shm_path, 4096, 1, -1,
					   TB_MEM_NO_THP), 0);
	assert_int_equal(stat(m.path, &st), 0);
	assert_int_equal(st.st_mode & 07777, TB_MEM_SHARED_MODE);
	tb_mem_free(&m);
	assert_int_equal(tb_mem_unlink_shared(shm_path), 0);

	umask(077); /* stricter than asked: still exactly the mode */
	assert_int_equal(tb_mem_create_shared(&m, shm_path, 4096, -1,
					      TB_MEM_NO_THP, 0640, getegid()),
			 0);
	assert_int_equal(stat(m.path, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0640);
	assert_int_equal(st.st_gid, getegid());
	tb_mem_free(&m);
	assert_int_equal(tb_mem_unlink_shared(shm_path), 0);
	assert_int_equal(tb_mem_create_shared(&m, shm_path, 4096, -1, 0,
					      01777, (gid_t)-1), TB_EINVAL);
	umask(old);
}

/* Nobody's link is followed when creating or opening, and a FIFO at the
 * path is refused at once: opening it for reading would wait for a
 * writer forever (a child runs the calls, so a hang fails the test). */
static void test_shared_link_and_fifo(void **state)
{
	char target[160];
	int status;
	pid_t pid;
	FILE *f;

	(void)state;
	snprintf(target, sizeof(target), "%s.target", shm_path);
	f = fopen(target, "w");
	assert_non_null(f);
	fputs("not yours", f);
	fclose(f);
	assert_int_equal(symlink(target, shm_path), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		tb_mem_t m;
		struct stat st;

		alarm(20);
		if (tb_mem_map_shared(&m, shm_path, 4096, 1, -1, TB_MEM_NO_THP) !=
		    TB_EBUSY)
			_exit(1);
		if (tb_mem_map_shared(&m, shm_path, 0, 0, -1, 0) == 0)
			_exit(2);
		if (stat(target, &st) != 0 || st.st_size != 9)
			_exit(3); /* truncated through the link */
		unlink(shm_path);
		if (mkfifo(shm_path, 0600) != 0)
			_exit(4);
		if (tb_mem_map_shared(&m, shm_path, 0, 0, -1, 0) != TB_EINVAL ||
		    !strstr(tb_errmsg(), "not a regular file"))
			_exit(5);
		if (tb_mem_map_shared(&m, shm_path, 0, 0, -1,
				      TB_MEM_READONLY) != TB_EINVAL)
			_exit(6);
		if (tb_mem_map_shared(&m, shm_path, 4096, 1, -1, 0) != TB_EBUSY)
			_exit(7);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	unlink(shm_path);
	unlink(target);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

static void test_shared_bad_args(void **state)
{
	(void)state;
	char longpath[400];
	tb_mem_t m;

	memset(longpath, 'a', sizeof(longpath) - 1);
	longpath[sizeof(longpath) - 1] = '\0';
	assert_int_equal(tb_mem_map_shared(NULL, shm_path, 4096, 1, -1, 0),
			 TB_EINVAL);
	assert_int_equal(tb_mem_map_shared(&m, NULL, 4096, 1, -1, 0),
			 TB_EINVAL);
	assert_int_equal(tb_mem_map_shared(&m, "", 4096, 1, -1, 0), TB_EINVAL);
	assert_int_equal(tb_mem_map_shared(&m, longpath, 4096, 1, -1, 0),
			 TB_EINVAL);
	assert_int_equal(tb_mem_map_shared(&m, shm_path, 0, 1, -1, 0),
			 TB_EINVAL);
	assert_int_equal(tb_mem_map_shared(&m, shm_path, 4096, 1, -1,
					   TB_MEM_READONLY),
			 TB_EINVAL);
	assert_int_equal(tb_mem_map_shared(&m, shm_path, 4096, 1, -1, 0x40),
			 TB_EINVAL);
	assert_int_equal(tb_mem_map_shared(&m, shm_path, 4096, 1, 100000, 0),
			 TB_EINVAL);
	/* Opening what is not there. */
	assert_int_equal(tb_mem_map_shared(&m, shm_path, 0, 0, -1, 0),
			 TB_ENOENT);
	assert_non_null(strstr(tb_errmsg(), shm_path));
	assert_null(m.addr);
	assert_int_equal(tb_mem_map_shared(&m, "/nonexistent-dir/x", 4096, 1,
					   -1, 0),
			 TB_ENOENT);
	/* Asking for more than the file holds. */
	assert_int_equal(tb_mem_map_shared(&m, shm_path, 4096, 1, -1,
					   TB_MEM_NO_THP),
			 0);
	tb_mem_free(&m);
	assert_int_equal(tb_mem_map_shared(&m, shm_path, 8192, 0, -1, 0),
			 TB_EINVAL);
	assert_null(m.addr);
	assert_int_equal(tb_mem_unlink_shared(shm_path), 0);
	assert_int_equal(tb_mem_unlink_shared(""), TB_EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_default_order),
		cmocka_unit_test(test_no_hugetlb_gives_thp),
		cmocka_unit_test(test_4k_fallback_rounds_to_pages),
		cmocka_unit_test(test_no_mlock),
		cmocka_unit_test(test_mlock_failure_is_a_warning),
		cmocka_unit_test(test_numa),
		cmocka_unit_test(test_alloc_bad_args),
		cmocka_unit_test(test_shared_across_fork),
		cmocka_unit_test(test_shared_4k_and_no_fake_hugetlbfs),
		cmocka_unit_test(test_shared_mode_and_group),
		cmocka_unit_test(test_shared_link_and_fifo),
		cmocka_unit_test(test_shared_bad_args),
	};
	int rc;

	snprintf(shm_path, sizeof(shm_path), "/dev/shm/tbtest-mem-%d",
		 (int)getpid());
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	unlink(shm_path);
	return rc;
}
