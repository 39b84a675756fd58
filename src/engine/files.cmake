# files.cmake — the engine's model-file sources (GGUF reader/writer, tensor
# types, tokenizers, llama2.c checkpoints). Included by
# src/engine/CMakeLists.txt, which compiles them into phasemark_engine.
# Internal headers (gguf.h, quant.h, tokenizer.h, llama2c.h) sit next to
# them in src/engine/.
set(LLM_FILES_DIR ${CMAKE_CURRENT_LIST_DIR})
set(LLM_FILES_SOURCES
    ${LLM_FILES_DIR}/quant.c
    ${LLM_FILES_DIR}/gguf.c
    ${LLM_FILES_DIR}/gguf_write.c
    ${LLM_FILES_DIR}/llama2c.c
    ${LLM_FILES_DIR}/tokenizer.c
    ${LLM_FILES_DIR}/tokenizer_encode.c
)
# quant.c uses libm (fabsf, roundf); link these with the sources.
set(LLM_FILES_LIBS m)
