#include "pm_kjv_prompts.h"

const char *const pm_kjv_prompts[PM_KJV_PROMPTS] = {
    "In the beginning God created",
    "And Jesus answered and said unto them,",
    "And the LORD spake unto Moses, saying,",
    "And it came to pass, when the king heard",
    "The LORD is my shepherd;",
    "Blessed are the poor in spirit:",
    "And God said, Let there be light:",
    "For God so loved the world,",
    "Then said Jesus unto his disciples,",
    "And the children of Israel",
    "Hear, O Israel:",
    "And David said unto Saul,",
    "Thus saith the LORD of hosts,",
    "And when they were come into the house,",
    "Now the serpent was more subtil than any beast",
    "And Moses went up unto God,",
    "Praise ye the LORD.",
    "And he opened his mouth, and taught them, saying,",
    "Let not your heart be troubled:",
    "And there was war in heaven:",
};
