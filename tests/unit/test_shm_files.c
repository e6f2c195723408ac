/*
 * The shm ring as a file on a host with other users: nothing put at the
 * path can hang, fool or be destroyed by a publisher or a subscriber.
 *
 *  - a ring squatted at the path by another user (simulated as root by
 *    chown to uid 65534; skipped when not root) is refused by readers,
 *    and replaced by the publisher whatever liveness it claims;
 *  - a FIFO at the path hangs neither end (the calls run in a child with
 *    an alarm, so a hang fails the test instead of stopping it);
 *  - a plain file or a symbolic link at shm_path is refused, not replaced,
 *    and what it held or points to is untouched;
 *  - rings get exactly the configured mode and group, whatever the umask;
 *    readers refuse a ring more open than that, or writable by others;
 *  - an unknown shm_group is a clear configuration error.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bus/transport/shm.h"
#include <tickbus/tickbus.h>

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define OTHER_UID 65534 /* nobody */

static char path[128], target[160];

static void cfg_for(tb_stream_cfg_t *cfg)
{
	tb_stream_cfg_init(cfg);
	snprintf(cfg->name, sizeof(cfg->name), "files");
	cfg->id = 31;
	cfg->transport = TB_TRANSPORT_SHM;
	cfg->ring_size = 64 << 10;
	cfg->heartbeat_ms = 10;
	cfg->liveness_timeout_ms = 1000;
	snprintf(cfg->shm_path, sizeof(cfg->shm_path), "%s", path);
}

static int setup(void **state)
{
	(void)state;
	snprintf(path, sizeof(path), "/dev/shm/tb-test-shm-files.%d", (int)getpid());
	snprintf(target, sizeof(target), "%s.target", path);
	unlink(path);
	unlink(target);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	unlink(path);
	unlink(target);
	return 0;
}

static void write_text(const char *where, const char *text)
{
	FILE *f = fopen(where, "w");

	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

static int text_is(const char *where, const char *text)
{
	char buf[256] = {0};
	FILE *f = fopen(where, "r");
	size_t n;

	if (!f)
		return 0;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	return n == strlen(text) && memcmp(buf, text, n) == 0;
}

static void on_count(void *clientd, const tb_msg_t *m)
{
	(void)m;
	++*(uint64_t *)clientd;
}

/* Runs `fn` in a child with a 20 s alarm; returns its exit status, or 128
 * + the signal that ended it (SIGALRM: it hung). */
static int in_child(int (*fn)(void))
{
	int status;
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0) {
		alarm(20);
		_exit(fn());
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* ----------------------------------------------------------- a squatter */

/* A "squatter": a live ring at the path, this time made by a real
 * publisher in a child (pid alive, heartbeat fresh), then given to another
 * user as if that user had made it first. */
static void squatted_ring_is_refused_by_readers_and_replaced(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	int pipefd[2], status;
	uint64_t got = 0;
	pid_t squatter;
	char c;

	(void)state;
	if (geteuid() != 0) {
		print_message("skipped: simulating another user's ring needs "
			      "root (chown)\n");
		skip();
	}
	cfg_for(&cfg);
	assert_int_equal(pipe(pipefd), 0);
	squatter = fork();
	assert_true(squatter >= 0);
	if (squatter == 0) {
		alarm(60);
		if (tb_publisher_open(&pub, &cfg) != 0)
			_exit(1);
		if (tb_pub_offer(pub, 1, "evil", 4) != 1)
			_exit(1);
		if (write(pipefd[1], "x", 1) != 1)
			_exit(1);
		pause(); /* alive, beating, until killed */
		_exit(0);
	}
	assert_int_equal(read(pipefd[0], &c, 1), 1);
	assert_int_equal(chown(path, OTHER_UID, OTHER_UID), 0);

	/* A reader does not trust it. */
	assert_int_equal(tb_subscriber_open(&sub, &cfg), TB_EAUTH);
	assert_non_null(strstr(tb_errmsg(), "belongs to uid 65534"));
	assert_non_null(strstr(tb_errmsg(), path));

	/* The real publisher is not kept out by its claims of life. */
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0);
	assert_int_equal(tb_pub_offer(pub, 1, "real", 4), 1);
	for (int i = 0; i < 1000 && got == 0; i++) {
		assert_true(tb_sub_poll(sub, on_count, &got, 16) >= 0);
		usleep(1000);
	}
	assert_int_equal(got, 1);
	tb_subscriber_close(sub);
	tb_publisher_close(pub);
	kill(squatter, SIGKILL);
	waitpid(squatter, &status, 0);
	close(pipefd[0]);
	close(pipefd[1]);
}

/* With shm_group set, a ring of another user in that group is trusted
 * (the publisher runs as its own user, its readers as theirs). */
static void ring_in_shm_group_is_trusted(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	struct stat st;

	(void)state;
	if (geteuid() != 0) {
		print_message("skipped: needs root (chown)\n");
		skip();
	}
	cfg_for(&cfg);
	snprintf(cfg.shm_group, sizeof(cfg.shm_group), "%u", 4242u);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0640);
	assert_int_equal(st.st_gid, 4242);
	assert_int_equal(chown(path, OTHER_UID, (gid_t)-1), 0);
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0);
	tb_subscriber_close(sub);
	/* The same ring without the group: another user's, refused. */
	cfg.shm_group[0] = '\0';
	cfg.shm_mode = 0640;
	assert_int_equal(tb_subscriber_open(&sub, &cfg), TB_EAUTH);
	tb_publisher_close(pub);
}

/* ----------------------------------------------------- a FIFO, a file */

static int open_publisher_on_fifo(void)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	int rc;

	cfg_for(&cfg);
	rc = tb_publisher_open(&pub, &cfg);
	if (rc == 0)
		return 1;
	return rc == TB_EFORMAT && strstr(tb_errmsg(), "a FIFO") ? 0 : 2;
}

static int open_subscriber_on_fifo(void)
{
	tb_stream_cfg_t cfg;
	tb_subscriber_t *sub;
	int rc;

	cfg_for(&cfg);
	rc = tb_subscriber_open(&sub, &cfg);
	if (rc == 0)
		return 1;
	return rc == TB_EFORMAT && strstr(tb_errmsg(), "a FIFO") ? 0 : 2;
}

static void fifo_at_the_path_hangs_nothing(void **state)
{
	struct stat st;

	(void)state;
	assert_int_equal(mkfifo(path, 0600), 0);
	assert_int_equal(in_child(open_publisher_on_fifo), 0);
	assert_int_equal(in_child(open_subscriber_on_fifo), 0);
	assert_int_equal(lstat(path, &st), 0);
	assert_true(S_ISFIFO(st.st_mode)); /* left where it was */
}

static void plain_file_at_shm_path_is_refused_not_replaced(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;

	(void)state;
	cfg_for(&cfg);
	write_text(path, "the desk's positions, not a ring\n");
	assert_int_equal(chmod(path, 0600), 0);
	assert_int_equal(tb_publisher_open(&pub, &cfg), TB_EFORMAT);
	assert_non_null(strstr(tb_errmsg(), "not a tickbus ring"));
	assert_non_null(strstr(tb_errmsg(), "refusing to replace it"));
	assert_true(text_is(path, "the desk's positions, not a ring\n"));
	assert_int_equal(tb_subscriber_open(&sub, &cfg), TB_EFORMAT);
	/* An empty file too. */
	write_text(path, "");
	assert_int_equal(tb_publisher_open(&pub, &cfg), TB_EFORMAT);
	assert_true(text_is(path, ""));
}

static void symlink_at_shm_path_is_refused_and_not_followed(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;

	(void)state;
	cfg_for(&cfg);
	write_text(target, "precious\n");
	assert_int_equal(symlink(target, path), 0);
	assert_int_equal(tb_publisher_open(&pub, &cfg), TB_EFORMAT);
	assert_non_null(strstr(tb_errmsg(), "symbolic link"));
	assert_int_equal(tb_subscriber_open(&sub, &cfg), TB_EFORMAT);
	assert_non_null(strstr(tb_errmsg(), "symbolic link"));
	assert_true(text_is(target, "precious\n"));
}

/* A stale ring of this user (its publisher gone) is replaced as before. */
static void stale_own_ring_is_replaced(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;

	(void)state;
	cfg_for(&cfg);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	tb_publisher_close(pub); /* the file stays, CLOSED */
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	tb_publisher_close(pub);
}

/* ------------------------------------------------------------ modes */

static void ring_mode_is_exactly_the_configured_one(void **state)
{
	mode_t old = umask(0);
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;
	struct stat st;

	(void)state;
	cfg_for(&cfg);
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0600);
	assert_int_equal(st.st_uid, geteuid());
	/* A reader refuses the ring once it is more open than configured,
	 * or writable by others. */
	assert_int_equal(chmod(path, 0644), 0);
	assert_int_equal(tb_subscriber_open(&sub, &cfg), TB_EAUTH);
	assert_non_null(strstr(tb_errmsg(), "more open than shm_mode 0600"));
	assert_int_equal(chmod(path, 0622), 0);
	cfg.shm_mode = 0644;
	assert_int_equal(tb_subscriber_open(&sub, &cfg), TB_EAUTH);
	assert_non_null(strstr(tb_errmsg(), "others than its owner could write"));
	assert_int_equal(chmod(path, 0600), 0);
	assert_int_equal(tb_subscriber_open(&sub, &cfg), 0); /* stricter: fine */
	tb_subscriber_close(sub);
	tb_publisher_close(pub);
	unlink(path);

	umask(077);
	cfg.shm_mode = 0644;
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0644);
	tb_publisher_close(pub);
	unlink(path);

	cfg.shm_mode = 0;
	snprintf(cfg.shm_group, sizeof(cfg.shm_group), "%u", (unsigned)getegid());
	assert_int_equal(tb_publisher_open(&pub, &cfg), 0);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0640);
	assert_int_equal(st.st_gid, getegid());
	tb_publisher_close(pub);
	umask(old);
}

static void unknown_shm_group_is_a_config_error(void **state)
{
	tb_stream_cfg_t cfg;
	tb_publisher_t *pub;
	tb_subscriber_t *sub;

	(void)state;
	cfg_for(&cfg);
	snprintf(cfg.shm_group, sizeof(cfg.shm_group), "no-such-group-xyz");
	assert_int_equal(tb_publisher_open(&pub, &cfg), TB_ECONFIG);
	assert_non_null(strstr(tb_errmsg(), "shm_group 'no-such-group-xyz'"));
	assert_int_equal(tb_subscriber_open(&sub, &cfg), TB_ECONFIG);
	assert_int_equal(access(path, F_OK), -1); /* nothing made */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(squatted_ring_is_refused_by_readers_and_replaced, setup, teardown),
		cmocka_unit_test_setup_teardown(ring_in_shm_group_is_trusted, setup, teardown),
		cmocka_unit_test_setup_teardown(fifo_at_the_path_hangs_nothing, setup, teardown),
		cmocka_unit_test_setup_teardown(plain_file_at_shm_path_is_refused_not_replaced, setup, teardown),
		cmocka_unit_test_setup_teardown(symlink_at_shm_path_is_refused_and_not_followed, setup, teardown),
		cmocka_unit_test_setup_teardown(stale_own_ring_is_replaced, setup, teardown),
		cmocka_unit_test_setup_teardown(ring_mode_is_exactly_the_configured_one, setup, teardown),
		cmocka_unit_test_setup_teardown(unknown_shm_group_is_a_config_error, setup, teardown),
	};
	return cmocka_run_group_tests_name("shm_files", tests, NULL, NULL);
}
