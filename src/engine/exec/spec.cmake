# Speculative decoding (issue 7): include/phasemark/spec.h, built into
# phasemark_engine.
list(APPEND LLM_PART_SOURCES ${CMAKE_CURRENT_LIST_DIR}/spec.c
  ${CMAKE_CURRENT_LIST_DIR}/drafter.c ${CMAKE_CURRENT_LIST_DIR}/spec_cost.c
  # The device loop's entry (CUDA builds run it; others refuse).
  ${CMAKE_CURRENT_LIST_DIR}/device_loop.c
  # Tree verification for the block drafter (issue 17 item 4).
  ${CMAKE_CURRENT_LIST_DIR}/draft_tree.c
  # The block drafter's head (issue 17): its file and its CPU forward.
  ${CMAKE_CURRENT_LIST_DIR}/../model/block_head.c)
