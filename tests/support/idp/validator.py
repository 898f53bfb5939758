"""The provider's claims: the user's name, address and groups (the group names, as the `groups`
claim, with the `openid` scope, in the ID token and the user info). A user whose name starts
with `wrong-nonce` gets an ID token whose nonce is not the one the client sent: a provider (or
someone in between) answering another sign-in's request."""

from oauth2_provider.oauth2_validators import OAuth2Validator

WRONG_NONCE, WRONG_AUDIENCE, WRONG_ISSUER = "wrong-nonce", "wrong-audience", "wrong-issuer"


class Validator(OAuth2Validator):
    oidc_claim_scope = {**OAuth2Validator.oidc_claim_scope, "groups": "openid"}

    def get_additional_claims(self, request):
        user = request.user
        return {
            "preferred_username": user.username,
            "email": user.email,
            "email_verified": True,
            "groups": sorted(user.groups.values_list("name", flat=True)),
        }

    def get_id_token_dictionary(self, token, token_handler, request):
        claims, expires = super().get_id_token_dictionary(token, token_handler, request)
        if request.user.username.startswith(WRONG_ISSUER):
            claims["iss"] = "https://idp.example.org/other"
        return claims, expires

    def finalize_id_token(self, id_token, token, token_handler, request):
        name = request.user.username
        if name.startswith(WRONG_NONCE):
            id_token["nonce"] = f"not-{request.nonce}"
        if name.startswith(WRONG_AUDIENCE):
            id_token["aud"] = "another-client"
        return super().finalize_id_token(id_token, token, token_handler, request)
