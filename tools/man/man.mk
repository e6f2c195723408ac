# Man pages (-include'd by the top-level Makefile).  Hand-written pages are
# tools/man/*.[1357]; a program without a hand-written page gets one made
# from its --help by tools/man/mkman.sh into $(BUILD)/man/, so that every
# tool has a page and none disagrees with its program.  `make install`
# installs them all under $(PREFIX)/share/man/man[1357].
MAN_SRC := $(wildcard tools/man/*.1 tools/man/*.3 tools/man/*.5 tools/man/*.7)
MAN_GEN_NAMES := $(filter-out $(notdir $(basename $(filter %.1,$(MAN_SRC)))),\
	$(notdir $(PROGS)))
MAN_GEN := $(addprefix $(BUILD)/man/,$(addsuffix .1,$(MAN_GEN_NAMES)))
MAN_PAGES = $(MAN_SRC) $(MAN_GEN)

ALL_TARGETS += $(MAN_GEN)

$(BUILD)/man/%.1: $(BUILD)/bin/% tools/man/mkman.sh
	@mkdir -p $(dir $@)
	@echo "  MAN     $@"
	$(Q)tools/man/mkman.sh $< $@
