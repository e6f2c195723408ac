/* The locked-memory budget (memlock.h): the verdict and its message for
 * each state a process can be in, the provider-sized estimates against
 * mlx5's arithmetic worked by hand, and the process's own state read. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bus/error.h"
#include "bus/memlock.h"
#include <tickbus/tickbus.h>

#include <string.h>
#include <sys/resource.h>

#define KIB 1024ull
#define MIB (1024ull * 1024)

static int msg_has(const char *s)
{
	return strstr(tb_errmsg(), s) != NULL;
}

static void over_the_limit_says_what_to_change(void **state)
{
	tb_memlock_state_t st = {.limit = 8 * MIB, .pinned = 1 * MIB};

	(void)state;
	assert_int_equal(tb_memlock_fits(&st, 7 * MIB, "it"), 0);
	assert_int_equal(tb_memlock_fits(&st, 7 * MIB + 1, "stream 'q': a subscriber"),
			 TB_ENOMEM);
	assert_true(msg_has("stream 'q': a subscriber needs 7.0 MiB of locked memory"));
	assert_true(msg_has("RLIMIT_MEMLOCK allows 8.0 MiB"));
	assert_true(msg_has("1.0 MiB is pinned already"));
	assert_true(msg_has("ulimit -l"));
	assert_true(msg_has("LimitMEMLOCK="));
	assert_true(msg_has("limits.conf"));
	assert_true(msg_has("CAP_IPC_LOCK"));
	/* Already over (pinned past the limit): nothing more fits. */
	st.pinned = 9 * MIB;
	assert_int_equal(tb_memlock_fits(&st, 1, "it"), TB_ENOMEM);
	assert_int_equal(tb_memlock_room_for(&st, 1), 0);
}

static void no_limit_applies(void **state)
{
	tb_memlock_state_t unlimited = {.limit = TB_MEMLOCK_UNLIMITED};
	tb_memlock_state_t capable = {.limit = 64 * KIB, .pinned = 64 * KIB,
				      .cap_ipc_lock = 1};

	(void)state;
	assert_int_equal(tb_memlock_fits(&unlimited, UINT64_MAX / 2, "it"), 0);
	assert_int_equal(tb_memlock_fits(&capable, 1ull << 40, "it"), 0);
	assert_true(tb_memlock_room_for(&unlimited, 1) == UINT64_MAX);
	assert_true(tb_memlock_room_for(&capable, 1) == UINT64_MAX);
}

static void room_counts_whole_blocks(void **state)
{
	tb_memlock_state_t st = {.limit = 10 * MIB, .pinned = 1 * MIB};

	(void)state;
	assert_true(tb_memlock_room_for(&st, 3 * MIB) == 3);
	assert_true(tb_memlock_room_for(&st, 9 * MIB) == 1);
	assert_true(tb_memlock_room_for(&st, 9 * MIB + 1) == 0);
}

/* mlx5, worked by hand: a send WQE is the operation's header, then the
 * inline data (4-byte header, rounded to 16) or 16 bytes per gather
 * entry, rounded to 64-byte blocks; queues are powers of two; receive
 * WQEs 16 bytes a scatter entry; one doorbell page each. */
static void estimates_follow_mlx5(void **state)
{
	(void)state;
	/* The rc publisher's QP: 1024 WRITEs of 220 bytes inline = 256-byte
	 * WQEs, 256 KiB; one receive, 16 bytes; page-rounded, + doorbell. */
	assert_int_equal(tb_memlock_qp_bytes(TB_MEMLOCK_WQE_RC_WRITE, 1024, 220, 1, 1),
			 256 * KIB + 4 * KIB + 4 * KIB);
	/* 224 inline: 32 + 228 -> 240 + 32 = 272 -> five blocks, 320 bytes,
	 * 1024 of them rounded up to 512 KiB. */
	assert_int_equal(tb_memlock_qp_bytes(TB_MEMLOCK_WQE_RC_WRITE, 1024, 224, 1, 1),
			 512 * KIB + 4 * KIB + 4 * KIB);
	/* ud: 188 inline after the 64-byte datagram header is one block set
	 * of 256 bytes. */
	assert_int_equal(tb_memlock_qp_bytes(TB_MEMLOCK_WQE_UD_SEND, 16, 188, 1, 0),
			 4 * KIB + 4 * KIB);
	/* The rc subscriber: 64 credit writes of 8 inline (64-byte WQEs),
	 * 2048 receives. */
	assert_int_equal(tb_memlock_qp_bytes(TB_MEMLOCK_WQE_RC_WRITE, 64, 8, 1, 2048),
			 4 * KIB + 32 * KIB + 4 * KIB);
	/* A CQ of n entries takes the power of two above n, 64 bytes each. */
	assert_int_equal(tb_memlock_cq_bytes(1040), 2048 * 64 + 4 * KIB);
	assert_int_equal(tb_memlock_cq_bytes(1023), 1024 * 64 + 4 * KIB);
	assert_int_equal(tb_memlock_cq_bytes(1), 4 * KIB + 4 * KIB);
	/* An MR is the pages it spans. */
	assert_int_equal(tb_memlock_mr_bytes((void *)4096, 8 * MIB), 8 * MIB);
	assert_int_equal(tb_memlock_mr_bytes((void *)(4096 + 100), 64), 4 * KIB);
	assert_int_equal(tb_memlock_mr_bytes((void *)(8192 - 8), 16), 8 * KIB);
	assert_int_equal(tb_memlock_mr_bytes((void *)4096, 0), 0);
}

static void sizes_read_as_text(void **state)
{
	char b[32];

	(void)state;
	assert_string_equal(tb_memlock_fmt(512, b, sizeof(b)), "512 bytes");
	assert_string_equal(tb_memlock_fmt(64 * KIB, b, sizeof(b)), "64.0 KiB");
	assert_string_equal(tb_memlock_fmt(8 * MIB + 512 * KIB, b, sizeof(b)), "8.5 MiB");
	assert_string_equal(tb_memlock_fmt(3ull << 30, b, sizeof(b)), "3.0 GiB");
}

/* This process's own state: the limit getrlimit gives, and a lowered one
 * seen at once. */
static void the_process_state(void **state)
{
	tb_memlock_state_t st;
	struct rlimit rl, low;

	(void)state;
	assert_int_equal(getrlimit(RLIMIT_MEMLOCK, &rl), 0);
	assert_int_equal(tb_memlock_read(&st), 0);
	if (rl.rlim_cur == RLIM_INFINITY)
		assert_true(st.limit == TB_MEMLOCK_UNLIMITED);
	else
		assert_true(st.limit == rl.rlim_cur);
	low = rl;
	low.rlim_cur = rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > 256 * KIB
			       ? 256 * KIB : rl.rlim_cur;
	assert_int_equal(setrlimit(RLIMIT_MEMLOCK, &low), 0);
	assert_int_equal(tb_memlock_read(&st), 0);
	assert_true(st.limit == low.rlim_cur);
	assert_int_equal(setrlimit(RLIMIT_MEMLOCK, &rl), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(over_the_limit_says_what_to_change),
		cmocka_unit_test(no_limit_applies),
		cmocka_unit_test(room_counts_whole_blocks),
		cmocka_unit_test(estimates_follow_mlx5),
		cmocka_unit_test(sizes_read_as_text),
		cmocka_unit_test(the_process_state),
	};

	return cmocka_run_group_tests_name("memlock", tests, NULL, NULL);
}
