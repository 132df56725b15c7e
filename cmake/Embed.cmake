# spotdnn_embed(OUTPUT out.cc NAMESPACE ns FUNCTION fn FILES a.json b.json ...)
# Generates a .cc that defines `std::span<const EmbeddedFile> ns::fn()` holding each file's base
# name (without extension) and bytes, so binaries carry the built-in data and work from any folder.
function(spotdnn_embed)
  cmake_parse_arguments(E "" "OUTPUT;NAMESPACE;FUNCTION" "FILES" ${ARGN})
  add_custom_command(
    OUTPUT ${E_OUTPUT}
    COMMAND ${CMAKE_COMMAND} -DOUTPUT=${E_OUTPUT} -DNAMESPACE=${E_NAMESPACE}
            -DFUNCTION=${E_FUNCTION} "-DFILES=${E_FILES}" -P ${PROJECT_SOURCE_DIR}/cmake/EmbedScript.cmake
    DEPENDS ${E_FILES} ${PROJECT_SOURCE_DIR}/cmake/EmbedScript.cmake
    COMMENT "Embedding ${E_FUNCTION} data"
    VERBATIM)
endfunction()
