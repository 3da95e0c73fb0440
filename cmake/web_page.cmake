# Web pages built by npm at build time and embedded into the binary (web/world, web/chat):
#
#   orchard_web_page(<label> WEB_DIR <npm project> OPTION <ORCHARD_..._PAGE> PLACEHOLDER <dir>
#                    HEADER <include> NAMESPACE <ns> FUNCTION <fn> BUILT_VAR <name>
#                    OUT_VAR <var> [DEPENDS <more inputs>...])
#
# defines the option (ON by default where node and npm are found), rebuilds the bundle with
# `npm run build` (web_npm_build.cmake: `npm ci` first when node_modules is missing or older than
# the lockfile; each file's Brotli and gzip forms written beside it) when the project's src/, package files, build.mjs or DEPENDS change, and writes a
# C++ source (its path in OUT_VAR) that defines `std::span<const core::EmbeddedFile> NS::FN()` and
# `const bool NS::BUILT_VAR`, as HEADER declares them. Without node/npm, or with the option OFF,
# the table holds the PLACEHOLDER folder's index.html, which says how to get the page.
set(ORCHARD_WEB_PAGE_CMAKE_DIR "${CMAKE_CURRENT_LIST_DIR}")
find_program(ORCHARD_NODE node)
find_program(ORCHARD_NPM npm)

function(orchard_web_page label)
  cmake_parse_arguments(PAGE "" "WEB_DIR;OPTION;PLACEHOLDER;HEADER;NAMESPACE;FUNCTION;BUILT_VAR;OUT_VAR" "DEPENDS" ${ARGN})
  if(ORCHARD_NODE AND ORCHARD_NPM)
    set(default ON)
  else()
    set(default OFF)
  endif()
  option(${PAGE_OPTION} "Build the ${label} page (needs node and npm)" ${default})
  if(${PAGE_OPTION} AND NOT (ORCHARD_NODE AND ORCHARD_NPM))
    message(FATAL_ERROR "[${label}] ${PAGE_OPTION}=ON needs node and npm on PATH")
  endif()

  set(out_cpp "${CMAKE_CURRENT_BINARY_DIR}/generated/${label}_assets.cpp")
  if(${PAGE_OPTION})
    message(STATUS "[${label}] ${label} page: built with ${ORCHARD_NPM}")
    set(dist "${CMAKE_CURRENT_BINARY_DIR}/${label}-dist")
    set(stamp "${CMAKE_CURRENT_BINARY_DIR}/${label}-dist.stamp")
    file(GLOB_RECURSE sources CONFIGURE_DEPENDS "${PAGE_WEB_DIR}/src/*")
    add_custom_command(
      OUTPUT "${stamp}"
      COMMAND "${CMAKE_COMMAND}" -DLABEL=${label} -DOPTION=${PAGE_OPTION} -DWEB_DIR=${PAGE_WEB_DIR} -DOUT_DIR=${dist}
              -DNPM=${ORCHARD_NPM} -DNODE=${ORCHARD_NODE} -DSTAMP=${stamp} -P "${ORCHARD_WEB_PAGE_CMAKE_DIR}/web_npm_build.cmake"
      DEPENDS ${sources} "${PAGE_WEB_DIR}/package.json" "${PAGE_WEB_DIR}/package-lock.json" "${PAGE_WEB_DIR}/build.mjs"
              ${PAGE_DEPENDS} "${ORCHARD_WEB_PAGE_CMAKE_DIR}/web_npm_build.cmake"
              "${ORCHARD_WEB_PAGE_CMAKE_DIR}/../web/build_page.mjs" "${ORCHARD_WEB_PAGE_CMAKE_DIR}/../web/compress_dist.mjs"
      COMMENT "[${label}] npm run build (${PAGE_WEB_DIR})"
      VERBATIM)
    set(built ON)
  else()
    message(WARNING "[${label}] node/npm not found (or ${PAGE_OPTION}=OFF): orchard is built without the ${label} "
                    "page; it serves a placeholder that says so. Install Node.js >= 18 with npm and reconfigure to get it.")
    set(dist "${PAGE_PLACEHOLDER}")
    set(stamp "${dist}/index.html")
    set(built OFF)
  endif()

  add_custom_command(
    OUTPUT "${out_cpp}"
    COMMAND "${CMAKE_COMMAND}" -DLABEL=${label} -DDIST_DIR=${dist} -DOUT=${out_cpp} -DBUILT=${built}
            -DHEADER=${PAGE_HEADER} -DNAMESPACE=${PAGE_NAMESPACE} -DFUNCTION=${PAGE_FUNCTION} -DBUILT_VAR=${PAGE_BUILT_VAR}
            -P "${ORCHARD_WEB_PAGE_CMAKE_DIR}/web_embed.cmake"
    DEPENDS "${stamp}" "${ORCHARD_WEB_PAGE_CMAKE_DIR}/web_embed.cmake"
    COMMENT "[${label}] embedding the ${label} page"
    VERBATIM)
  set(${PAGE_OUT_VAR} "${out_cpp}" PARENT_SCOPE)
endfunction()
