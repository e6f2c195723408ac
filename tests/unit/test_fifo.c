/*
 * The SPSC entry queue behind subscriber recovery: entries come out in the
 * order they went in, whole, across wraps (padding stepped over), a full
 * queue refuses instead of overwriting, an entry too big to ever fit is
 * refused, and a producer and a consumer thread hand over a million
 * entries of varying size without loss or corruption.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bus/fifo.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#define CAP 4096u

static int push(tb_fifo_t *q, uint64_t seq, uint32_t len)
{
	tb_fifo_ent_t *e = tb_fifo_reserve(q, len);

	if (!e)
		return -1;
	e->kind = TB_FIFO_FRAME;
	e->seq = seq;
	memset(tb_fifo_payload(e), (int)(seq & 0xff), len);
	tb_fifo_commit(q);
	return 0;
}

static int pop(tb_fifo_t *q, uint64_t *seq, uint32_t *len)
{
	tb_fifo_ent_t *e = tb_fifo_peek(q);
	const uint8_t *p;

	if (!e)
		return -1;
	assert_int_equal(e->kind, TB_FIFO_FRAME);
	p = tb_fifo_payload(e);
	for (uint32_t i = 0; i < e->len; i++)
		if (p[i] != (uint8_t)(e->seq & 0xff))
			fail_msg("entry %llu byte %u corrupt",
				 (unsigned long long)e->seq, i);
	*seq = e->seq;
	*len = e->len;
	tb_fifo_release(q, e);
	return 0;
}

static void test_order_wrap_and_full(void **state)
{
	void *mem = aligned_alloc(TB_FIFO_ALIGN, CAP);
	tb_fifo_t q;
	uint64_t seq, in = 1, out = 1;
	uint32_t len;

	(void)state;
	tb_fifo_init(&q, mem, CAP);
	assert_null(tb_fifo_peek(&q));
	assert_true(tb_fifo_empty(&q));
	/* Too big to ever fit (it must fit twice). */
	assert_null(tb_fifo_reserve(&q, CAP));
	assert_null(tb_fifo_reserve(&q, (uint32_t)tb_fifo_max_payload(&q) + 1));
	/* Fill until refused: nothing is overwritten. */
	while (push(&q, in, 100) == 0)
		in++;
	assert_true(in > 10);
	assert_int_equal(pop(&q, &seq, &len), 0);
	assert_int_equal(seq, out++);
	assert_int_equal(len, 100);
	/* Many rounds of odd sizes, crossing the end many times. */
	for (int round = 0; round < 2000; round++) {
		uint32_t l = (uint32_t)(round * 37 % 700);

		while (push(&q, in, l) != 0) {
			assert_int_equal(pop(&q, &seq, &len), 0);
			assert_int_equal(seq, out++);
		}
		in++;
	}
	while (pop(&q, &seq, &len) == 0)
		assert_int_equal(seq, out++);
	assert_int_equal(out, in);
	assert_true(tb_fifo_empty(&q));
	free(mem);
}

struct spsc {
	tb_fifo_t q;
	uint64_t n;
};

static void *producer(void *arg)
{
	struct spsc *s = arg;

	for (uint64_t i = 1; i <= s->n; i++)
		while (push(&s->q, i, (uint32_t)(i % 300)) != 0)
			sched_yield();
	return NULL;
}

static void test_two_threads(void **state)
{
	struct spsc s;
	void *mem = aligned_alloc(TB_FIFO_ALIGN, 1u << 16);
	pthread_t t;
	uint64_t next = 1, seq;
	uint32_t len;

	(void)state;
	tb_fifo_init(&s.q, mem, 1u << 16);
	s.n = 1000000;
	assert_int_equal(pthread_create(&t, NULL, producer, &s), 0);
	while (next <= s.n) {
		if (pop(&s.q, &seq, &len) != 0) {
			sched_yield();
			continue;
		}
		assert_int_equal(seq, next);
		assert_int_equal(len, next % 300);
		next++;
	}
	pthread_join(t, NULL);
	assert_true(tb_fifo_empty(&s.q));
	free(mem);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_order_wrap_and_full),
		cmocka_unit_test(test_two_threads),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
