# The house warning set (STYLE.md, "Build"). Applied per target through
# pm_strict(target) so that third-party code we never compile is unaffected.
set(PM_WARNINGS -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes
    -Wformat=2 -Wvla -Wpointer-arith)
if(PHASEMARK_WERROR)
  list(APPEND PM_WARNINGS -Werror)
endif()
if(PHASEMARK_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
endif()

function(pm_strict target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:C>:${PM_WARNINGS}>)
endfunction()
