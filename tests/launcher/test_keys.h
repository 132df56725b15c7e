// A fixed RSA key for the launcher tests (generated with `openssl genpkey -algorithm RSA
// -pkeyopt rsa_keygen_bits:2048`; it signs nothing but test assertions) and a service-account
// assertion signed with it by the openssl command line, independently of the code under test.
#ifndef SPOTDNN_TESTS_LAUNCHER_TEST_KEYS_H_
#define SPOTDNN_TESTS_LAUNCHER_TEST_KEYS_H_

namespace spotdnn::launcher::testing {

inline constexpr char kTestRsaKeyPem[] =
    "-----BEGIN PRIVATE KEY-----\n"
    "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC4Otyxi7ewl2i7\n"
    "B7QidukrNsBs4KsjAJM1pgZ5k8meRmzur8fjGbvtN2ztvsFWKmcVNPNjGbdkklJE\n"
    "wIgYtkbPkLnRbIfdCCdfuFNGGjCJ7Y9jigYKk485QL6Lp8A6le28aRuRt7QMOkCZ\n"
    "r2k2sqdNdzwKHy0t0m42avzd5c4O8ejqd3pKN+Z1fWe0VFiyO06/07g4UBJOQLRR\n"
    "CYITzBZBPl/MwrRvU/cgiA7V2/KiAzV93BZ9ZgD4URMY34bq4YfsQjVbwq89ttmL\n"
    "bzZTsaVURFKH3u2xiPhrloqnyXd3tvRtSwSHDwxnyoStcdb0X0yk0YQYDF6665Ar\n"
    "m16+QDCJAgMBAAECggEAB8mD0u9kcXmc6tbtsCKVmDGFcF9jbHnVlHLIRZ2lFo8Z\n"
    "2Kb5IdTQeDubsPBGDNCDBfGfM2T+tv4RAyieOBPa/2K52qvQkbEKtQWTY4cE3oz6\n"
    "PstdQQIxZMqjTeo7z7N5q+PyJIvUIkuDYoZNwgr1fmqX+5eLbys8ubPLrMzOE8c8\n"
    "jupSBpEwsyfSxAbmZ7Wx1Qee2Nj/lrnFyOV9Ygc1f4RuR8X5hTzbZ8u0lGlP4Cnc\n"
    "SEavL/2wBEd7rUSFMRJDBP/3JX3q8PRv/XMQgPm84k/suF6Eenb3HJuGqJSrWPmW\n"
    "nLHfhNuEFl+W+wPOOZpq/uunjorpalm+PFG+nMoTlwKBgQDcDfyrWXZp0C3sncGl\n"
    "rhEvw0Eqhq/Lw/j6L9ORKrUZHVkD48Hcy1xcD3RGnyc4NGvE98WaK0s0Z7pYmcxC\n"
    "pXk/gKSohsXJBU1cexp8B4lqdHYyJaUCLFags2MUqqBQYd3oJHbWAfojTVlhR9w6\n"
    "0z7EHZ80Dt9GrVEJvDu/Y6uJtwKBgQDWUsuVPSF6w/lf1xHhrL9xB1+w/6cLAV4P\n"
    "LjNAKyghCYiv8O1gq27l4GFzlU0HjJb7hBqh1vXRU8AGnye9bokYufPR2ms/Mfwz\n"
    "GPN/eQhAqS0EN3qD+RKXdmfNxYdMLQi5pBKmENp6zY2dcxi055I9FnBDLBSXykgF\n"
    "4evpe0MXvwKBgQC2cr5YTz93ccxxz0acGJtVT307RhqBRoWq4XZ3eMJYBVYlfHPi\n"
    "nZWBGqscVp6M4iGsWIY0Ucrzs0D0bufFJi9GMGHU/JEGH2hJ0iNeTF1prw/EeiO6\n"
    "jopwiOsQWnu6ybnT3E/PFiqPlHUTzCHTgAwdTDYQUnhawB5dhPzArWGvNwKBgHbb\n"
    "mc2dBkkoD89H3cHS5KSRW080qHXg/0HZ9FA83tdbizNPoMWArVLM2h6YiQyLuluo\n"
    "CoEATnkVQiQp9YcHmv5cecxCnkGAvgW0a62g+KOrbqys+8PeyKG4555lUkA7pWAW\n"
    "jsUMCa4a+tN7thL1bdN08zM9afo4EzM39HYahr3PAoGAFkGfsoLGuzmht8MARQxd\n"
    "DIUf6aFrJtOKHtbCpLR+yjk4w5eMk6TiEHMlNjTV668xIQBwEmsAlSp5d3PZCEQC\n"
    "+prK4tKa04WYTE9TR9eIFTXZIa67rtusNl/huIJGB0fa7GRtzwXlM5ZPB3H0bggb\n"
    "iCqivx/M61XZcIVB9RnM+gg=\n"
    "-----END PRIVATE KEY-----\n";

// ServiceAccountAssertion for client_email launcher@spotdnn-test.iam.gserviceaccount.com,
// private_key_id 0123456789abcdef0123456789abcdef01234567, token_uri
// https://oauth2.googleapis.com/token, scope cloud-platform, iat 1700000000, lifetime 1 h, as
// computed by:
//   b64u() { openssl base64 -A | tr '+/' '-_' | tr -d '='; }
//   IN="$(printf %s "$HEADER" | b64u).$(printf %s "$CLAIMS" | b64u)"
//   SIG=$(printf %s "$IN" | openssl dgst -sha256 -sign key.pem | b64u)
// with HEADER {"alg":"RS256","kid":"0123...567","typ":"JWT"} and CLAIMS {"aud":...,"exp":
// 1700003600,"iat":1700000000,"iss":...,"scope":...} (keys sorted, no spaces).
inline constexpr char kTestAssertion[] =
    "eyJhbGciOiJSUzI1NiIsImtpZCI6IjAxMjM0NTY3ODlhYmNkZWYwMTIzNDU2Nzg5YWJjZGVmMDEyMzQ1NjciLCJ0eX"
    "AiOiJKV1QifQ.eyJhdWQiOiJodHRwczovL29hdXRoMi5nb29nbGVhcGlzLmNvbS90b2tlbiIsImV4cCI6MTcwMDAwM"
    "zYwMCwiaWF0IjoxNzAwMDAwMDAwLCJpc3MiOiJsYXVuY2hlckBzcG90ZG5uLXRlc3QuaWFtLmdzZXJ2aWNlYWNjb3V"
    "udC5jb20iLCJzY29wZSI6Imh0dHBzOi8vd3d3Lmdvb2dsZWFwaXMuY29tL2F1dGgvY2xvdWQtcGxhdGZvcm0ifQ.qG"
    "TuvoOXdSVgVVkeDnkMjkIBzF66NkInJHIR8-9_06lNkRd8Ylpy91uA2305Qqq40iUc6BOaeIkMJEjuRb2mGWcukCaY"
    "KTNZuDehEnYk-AkLqutsl_kaMm1jlGSSzqMKiSeGLjI44s2nKigPax5EMSTKfz8GUOYfJZClm4TbSscqm_Iut4StzQ"
    "HAC2S_BpBKyMEzKTI6H1GNv6uDaQNpIYpnVBIVmxFC_zKeYN27MXpaskJcl8O2i5gSHoDVYBAMZCa1sAeJmgo2zL6O"
    "3wjqwC12hhMxkdyoTKgh_2gne2gbZUJgidwoL2jIPMoILPvSgXwlIB8IbY4grRaR9mapow";

}  // namespace spotdnn::launcher::testing

#endif  // SPOTDNN_TESTS_LAUNCHER_TEST_KEYS_H_
