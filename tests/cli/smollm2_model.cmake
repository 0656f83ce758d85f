# Sets `model` to the cached SmolLM2 GGUF (PARTIX_SMOLLM2_GGUF, else the cache folder), or to ""
# with a SKIPPED line when it is not there (scripts/fetch_smollm2.sh fetches it).
if(DEFINED ENV{PARTIX_SMOLLM2_GGUF})
  set(model $ENV{PARTIX_SMOLLM2_GGUF})
elseif(DEFINED ENV{PARTIX_CACHE})
  set(model $ENV{PARTIX_CACHE}/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf)
else()
  set(model $ENV{HOME}/.cache/partix/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf)
endif()
if(NOT EXISTS ${model})
  message("SKIPPED: the SmolLM2 GGUF is not cached (scripts/fetch_smollm2.sh)")
  set(model "")
endif()
