# Layer-split execution (issue 6): placements over local and remote shards,
# built into phasemark_engine. Remote shards speak the shard wire.
list(APPEND LLM_PART_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/split.c
  ${CMAKE_CURRENT_LIST_DIR}/split_spec.c
  ${CMAKE_CURRENT_LIST_DIR}/split_remote.c)
# A spawned shard runs pm-shardd; inside the build tree it is found here
# (installed, it is looked up beside the program and on PATH).
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/split_remote.c PROPERTIES
  COMPILE_DEFINITIONS "LLM_SHARDD_BUILD_PATH=\"${CMAKE_BINARY_DIR}/tools/shardd/pm-shardd\"")
# Remote shards speak the shard wire.
list(APPEND LLM_PART_LIBS phasemark_wire)

# libFuzzer target for the placement parser (scripts/fuzz runs every
# fuzz_*; seeds in tests/fuzz/corpus/placement/). The parser is compiled
# into the target itself so that it carries the coverage instrumentation.
if(PHASEMARK_FUZZ)
  add_executable(fuzz_placement ${PROJECT_SOURCE_DIR}/tests/split/fuzz_placement.c
                 ${CMAKE_CURRENT_LIST_DIR}/split_spec.c)
  target_include_directories(fuzz_placement PRIVATE ${PM_ENGINE_INTERNAL_DIRS})
  target_compile_options(fuzz_placement PRIVATE -fsanitize=fuzzer,address,undefined
                         -fno-sanitize-recover=all)
  target_link_options(fuzz_placement PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(fuzz_placement PRIVATE phasemark_engine)
  pm_strict(fuzz_placement)
endif()
