# tb-doctor's checks, one group a file (tools/doctor/doctor.h), linked into
# $(BUILD)/bin/tb-doctor (-include'd by the top-level Makefile).
TB_DOCTOR_OBJS := $(patsubst %.c,$(BUILD)/obj/%.o,$(wildcard tools/doctor/*.c))
$(BUILD)/bin/tb-doctor: $(TB_DOCTOR_OBJS)
# A verdict's text is cut at its buffer on purpose (TB_DOCTOR_TEXT): GCC's
# guesses about how long each %s may be are noise here.
$(TB_DOCTOR_OBJS): CFLAGS += -Wno-format-truncation
