# Builds an npm web project (web/<page>) into OUT_DIR: `npm ci` when node_modules is missing or
# older than the lockfile, then `npm run build -- --outdir OUT_DIR`, then writes each file's
# Brotli and gzip forms beside it (web/compress_dist.mjs), then touches STAMP.
#   cmake -DLABEL=<page> -DOPTION=<its CMake option> -DWEB_DIR=... -DOUT_DIR=... -DNPM=... -DNODE=...
#         -DSTAMP=... -P web_npm_build.cmake
cmake_minimum_required(VERSION 3.22)
set(marker "${WEB_DIR}/node_modules/.package-lock.json")
if(NOT EXISTS "${marker}" OR "${WEB_DIR}/package-lock.json" IS_NEWER_THAN "${marker}")
  message(STATUS "[${LABEL}] npm ci in ${WEB_DIR}")
  execute_process(COMMAND "${NPM}" ci --no-audit --no-fund
                  WORKING_DIRECTORY "${WEB_DIR}" RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "[${LABEL}] npm ci failed (${rc}) in ${WEB_DIR}: is the npm registry reachable? "
                        "Configure with -D${OPTION}=OFF to build without the page.")
  endif()
endif()
execute_process(COMMAND "${NPM}" run --silent build -- --outdir "${OUT_DIR}"
                WORKING_DIRECTORY "${WEB_DIR}" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "[${LABEL}] npm run build failed (${rc}) in ${WEB_DIR}")
endif()
execute_process(COMMAND "${NODE}" "${CMAKE_CURRENT_LIST_DIR}/../web/compress_dist.mjs" "${OUT_DIR}" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "[${LABEL}] compressing the page's files in ${OUT_DIR} failed (${rc})")
endif()
file(TOUCH "${STAMP}")
