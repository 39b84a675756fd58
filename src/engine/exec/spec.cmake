# Speculative decoding (issue 7): include/phasemark/spec.h, built into
# phasemark_engine.
list(APPEND LLM_PART_SOURCES ${CMAKE_CURRENT_LIST_DIR}/spec.c
  ${CMAKE_CURRENT_LIST_DIR}/drafter.c ${CMAKE_CURRENT_LIST_DIR}/spec_cost.c)
