/* Sequence classification shared by every transport. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "bus/seq.h"

static void in_order_is_next(void **state)
{
	tb_seq_t s;
	tb_seq_range_t g = {0, 0};
	uint64_t i;

	(void)state;
	tb_seq_init(&s, 1);
	for (i = 1; i <= 1000; i++)
		assert_int_equal(tb_seq_classify(&s, i, &g), TB_SEQ_NEXT);
	assert_int_equal(s.expected, 1001);
	assert_int_equal(s.delivered, 1000);
	assert_int_equal(s.gaps, 0);
	assert_int_equal(s.duplicates, 0);
}

static void first_frame_starts_a_late_joiner(void **state)
{
	tb_seq_t s;
	tb_seq_range_t g = {0, 0};

	(void)state;
	tb_seq_init(&s, 0);
	assert_int_equal(tb_seq_classify(&s, 5000, &g), TB_SEQ_NEXT);
	assert_int_equal(s.expected, 5001);
	assert_int_equal(tb_seq_classify(&s, 5001, &g), TB_SEQ_NEXT);
	assert_int_equal(s.gaps, 0);
}

static void older_is_duplicate(void **state)
{
	tb_seq_t s;
	tb_seq_range_t g = {0, 0};

	(void)state;
	tb_seq_init(&s, 1);
	tb_seq_classify(&s, 1, &g);
	tb_seq_classify(&s, 2, &g);
	assert_int_equal(tb_seq_classify(&s, 2, &g), TB_SEQ_DUPLICATE);
	assert_int_equal(tb_seq_classify(&s, 1, &g), TB_SEQ_DUPLICATE);
	assert_int_equal(s.duplicates, 2);
	assert_int_equal(s.expected, 3);
	assert_int_equal(tb_seq_classify(&s, 3, &g), TB_SEQ_NEXT);
}

static void jump_is_gap_with_exact_range(void **state)
{
	tb_seq_t s;
	tb_seq_range_t g = {0, 0};

	(void)state;
	tb_seq_init(&s, 1);
	tb_seq_classify(&s, 1, &g);
	assert_int_equal(tb_seq_classify(&s, 5, &g), TB_SEQ_GAP);
	assert_int_equal(g.first, 2);
	assert_int_equal(g.last, 4);
	assert_int_equal(s.expected, 6);
	assert_int_equal(s.missing, 3);
	/* A frame from inside the reported gap arriving late is older than
	 * expected now: the caller that wants it back uses recovery. */
	assert_int_equal(tb_seq_classify(&s, 3, &g), TB_SEQ_DUPLICATE);
	assert_int_equal(tb_seq_classify(&s, 6, &g), TB_SEQ_NEXT);
	assert_int_equal(tb_seq_classify(&s, 7, &g), TB_SEQ_NEXT);
	assert_int_equal(tb_seq_classify(&s, 8 + 1000000, &g), TB_SEQ_GAP);
	assert_int_equal(g.first, 8);
	assert_int_equal(g.last, 8 + 999999);
	assert_int_equal(s.gaps, 2);
	assert_int_equal(s.missing, 3 + 1000000);
}

static void gap_to_stops_before_the_revealing_frame(void **state)
{
	tb_seq_t s;
	tb_seq_range_t g = {0, 0};

	(void)state;
	tb_seq_init(&s, 10);
	tb_seq_gap_to(&s, 15, &g);
	assert_int_equal(g.first, 10);
	assert_int_equal(g.last, 14);
	assert_int_equal(s.expected, 15);
	assert_int_equal(s.delivered, 0);
	assert_int_equal(tb_seq_classify(&s, 15, &g), TB_SEQ_NEXT);
}

static void sequence_near_wrap_of_64_bits(void **state)
{
	tb_seq_t s;
	tb_seq_range_t g = {0, 0};

	(void)state;
	tb_seq_init(&s, UINT64_MAX - 3);
	assert_int_equal(tb_seq_classify(&s, UINT64_MAX - 3, &g), TB_SEQ_NEXT);
	assert_int_equal(tb_seq_classify(&s, UINT64_MAX - 1, &g), TB_SEQ_GAP);
	assert_int_equal(g.first, UINT64_MAX - 2);
	assert_int_equal(g.last, UINT64_MAX - 2);
}

/* tb_seq_admit: the rule the transports' polls apply. */
static void admit_in_order_and_late_join(void **state)
{
	tb_seq_t s;

	(void)state;
	tb_seq_init(&s, 0);
	assert_int_equal(tb_seq_admit(&s, 700), TB_SEQ_NEXT);  /* late join */
	assert_int_equal(s.expected, 701);
	for (uint64_t i = 701; i <= 1700; i++)
		assert_int_equal(tb_seq_admit(&s, i), TB_SEQ_NEXT);
	assert_int_equal(s.expected, 1701);
	assert_int_equal(s.delivered, 1001);
	assert_int_equal(s.duplicates, 0);
	assert_int_equal(s.gaps, 0);
	assert_int_equal(s.missing, 0);
}

static void admit_duplicate_is_counted_and_changes_nothing_else(void **state)
{
	tb_seq_t s;

	(void)state;
	tb_seq_init(&s, 1);
	assert_int_equal(tb_seq_admit(&s, 1), TB_SEQ_NEXT);
	assert_int_equal(tb_seq_admit(&s, 2), TB_SEQ_NEXT);
	assert_int_equal(tb_seq_admit(&s, 1), TB_SEQ_DUPLICATE);
	assert_int_equal(tb_seq_admit(&s, 2), TB_SEQ_DUPLICATE);
	assert_int_equal(s.duplicates, 2);
	assert_int_equal(s.expected, 3);
	assert_int_equal(s.delivered, 2);
}

/* A gap leaves the tracker as it was until the caller reports it; then the
 * frame that revealed it is admitted as the next. */
static void admit_gap_waits_for_the_report(void **state)
{
	tb_seq_t s;
	tb_seq_range_t g = {0, 0};

	(void)state;
	tb_seq_init(&s, 1);
	assert_int_equal(tb_seq_admit(&s, 1), TB_SEQ_NEXT);
	assert_int_equal(tb_seq_admit(&s, 9), TB_SEQ_GAP);
	assert_int_equal(s.expected, 2);
	assert_int_equal(s.delivered, 1);
	assert_int_equal(s.gaps, 0);
	assert_int_equal(s.missing, 0);
	/* Asked again (the caller delivered others first): the same answer. */
	assert_int_equal(tb_seq_admit(&s, 9), TB_SEQ_GAP);
	tb_seq_gap_to(&s, 9, &g);
	assert_int_equal(g.first, 2);
	assert_int_equal(g.last, 8);
	assert_int_equal(s.gaps, 1);
	assert_int_equal(s.missing, 7);
	assert_int_equal(tb_seq_admit(&s, 9), TB_SEQ_NEXT);
	assert_int_equal(s.expected, 10);
	assert_int_equal(s.delivered, 2);
	/* A frame from inside the reported gap, late: a duplicate. */
	assert_int_equal(tb_seq_admit(&s, 5), TB_SEQ_DUPLICATE);
}

/* A start asked for (tb_seq_init with first > 0) is not a late join: an
 * earlier frame is a duplicate, a later one a gap. */
static void admit_with_a_given_start(void **state)
{
	tb_seq_t s;

	(void)state;
	tb_seq_init(&s, 100);
	assert_int_equal(tb_seq_admit(&s, 99), TB_SEQ_DUPLICATE);
	assert_int_equal(tb_seq_admit(&s, 101), TB_SEQ_GAP);
	assert_int_equal(tb_seq_admit(&s, 100), TB_SEQ_NEXT);
	assert_int_equal(tb_seq_admit(&s, 101), TB_SEQ_NEXT);
	assert_int_equal(s.expected, 102);
}

/* tb_seq_classify is tb_seq_admit plus the report and the delivery. */
static void classify_agrees_with_admit(void **state)
{
	static const uint64_t in[] = {0, 3, 4, 4, 2, 9, 10, 10, 15, 16, 1};
	tb_seq_t a, c;
	tb_seq_range_t ga = {0, 0}, gc = {0, 0};

	(void)state;
	tb_seq_init(&a, 0);
	tb_seq_init(&c, 0);
	for (size_t i = 1; i < sizeof(in) / sizeof(in[0]); i++) {
		enum tb_seq_class k = tb_seq_admit(&a, in[i]);

		if (k == TB_SEQ_GAP) {
			tb_seq_gap_to(&a, in[i], &ga);
			assert_int_equal(tb_seq_admit(&a, in[i]), TB_SEQ_NEXT);
		}
		assert_int_equal(tb_seq_classify(&c, in[i], &gc), k);
		assert_int_equal(a.expected, c.expected);
		assert_int_equal(a.delivered, c.delivered);
		assert_int_equal(a.duplicates, c.duplicates);
		assert_int_equal(a.gaps, c.gaps);
		assert_int_equal(a.missing, c.missing);
		if (k == TB_SEQ_GAP) {
			assert_int_equal(ga.first, gc.first);
			assert_int_equal(ga.last, gc.last);
		}
	}
	assert_int_equal(c.gaps, 2);
	assert_int_equal(c.duplicates, 4);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(in_order_is_next),
		cmocka_unit_test(first_frame_starts_a_late_joiner),
		cmocka_unit_test(older_is_duplicate),
		cmocka_unit_test(jump_is_gap_with_exact_range),
		cmocka_unit_test(gap_to_stops_before_the_revealing_frame),
		cmocka_unit_test(sequence_near_wrap_of_64_bits),
		cmocka_unit_test(admit_in_order_and_late_join),
		cmocka_unit_test(admit_duplicate_is_counted_and_changes_nothing_else),
		cmocka_unit_test(admit_gap_waits_for_the_report),
		cmocka_unit_test(admit_with_a_given_start),
		cmocka_unit_test(classify_agrees_with_admit),
	};
	return cmocka_run_group_tests_name("seq", tests, NULL, NULL);
}
