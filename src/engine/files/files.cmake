# files.cmake — the engine's model-file sources (GGUF reader/writer, tensor
# types, tokenizers, llama2.c checkpoints). Included by
# src/engine/CMakeLists.txt, which compiles them into phasemark_engine.
# Internal headers (gguf.h, quant.h, tokenizer.h, llama2c.h) sit next to
# them in src/engine/files/; they return the public status codes of
# include/phasemark/engine.h, so a target compiling them alone needs both
# folders (LLM_FILES_INCLUDES).
set(LLM_FILES_DIR ${CMAKE_CURRENT_LIST_DIR})
set(LLM_FILES_INCLUDES ${LLM_FILES_DIR} ${LLM_FILES_DIR}/../../../include)
set(LLM_FILES_SOURCES
    ${LLM_FILES_DIR}/errtext.c
    ${LLM_FILES_DIR}/quant.c
    ${LLM_FILES_DIR}/quant_k.c
    ${LLM_FILES_DIR}/quant_legacy.c
    ${LLM_FILES_DIR}/gguf.c
    ${LLM_FILES_DIR}/gguf_write.c
    ${LLM_FILES_DIR}/llama2c.c
    ${LLM_FILES_DIR}/tokenizer.c
    ${LLM_FILES_DIR}/tokenizer_encode.c
    ${LLM_FILES_DIR}/tokenizer_special.c
    ${LLM_FILES_DIR}/tokenizer_unicode.c
    ${LLM_FILES_DIR}/tokenizer_pre.c
    ${LLM_FILES_DIR}/tokenizer_ucd.c
    ${LLM_FILES_DIR}/tokenizer_wpm.c
)
# quant.c uses libm (fabsf, roundf); link these with the sources.
set(LLM_FILES_LIBS m)

# libFuzzer target over the GGUF parser (and the readers of its metadata).
# Defined here rather than under tests/ because fuzz builds configure with
# BUILD_TESTING=OFF; scripts/fuzz finds every fuzz_* executable.
if(PHASEMARK_FUZZ AND CMAKE_C_COMPILER_ID MATCHES "Clang" AND NOT TARGET fuzz_gguf)
  add_executable(fuzz_gguf ${LLM_FILES_DIR}/../../../tests/engine/files/fuzz_gguf.c ${LLM_FILES_SOURCES})
  target_include_directories(fuzz_gguf PRIVATE ${LLM_FILES_INCLUDES})
  target_compile_options(fuzz_gguf PRIVATE -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all)
  target_link_options(fuzz_gguf PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(fuzz_gguf PRIVATE ${LLM_FILES_LIBS})
  pm_strict(fuzz_gguf)
endif()

# The same for special-token parsing over arbitrary text.
if(PHASEMARK_FUZZ AND CMAKE_C_COMPILER_ID MATCHES "Clang" AND NOT TARGET fuzz_tokenizer_special)
  add_executable(fuzz_tokenizer_special ${LLM_FILES_DIR}/../../../tests/engine/files/fuzz_tokenizer_special.c
                 ${LLM_FILES_SOURCES})
  target_include_directories(fuzz_tokenizer_special PRIVATE ${LLM_FILES_INCLUDES})
  target_compile_definitions(fuzz_tokenizer_special PRIVATE _POSIX_C_SOURCE=200809L)
  target_compile_options(fuzz_tokenizer_special PRIVATE -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all)
  target_link_options(fuzz_tokenizer_special PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(fuzz_tokenizer_special PRIVATE ${LLM_FILES_LIBS})
  pm_strict(fuzz_tokenizer_special)
endif()
