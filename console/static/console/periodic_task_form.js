"use strict";
// The periodic task form of django-celery-beat (templates/admin/djcelery/change_periodictask_form.html):
// the crontab field's help says, in words, when the chosen crontab runs. django-celery-beat's
// inline script, moved to a file for the Content-Security-Policy, and writing text, not HTML.
{
    const $ = django.jQuery;
    const readableCrontabs = JSON.parse(document.getElementById("readable-crontabs").textContent);
    const crontabHelp = JSON.parse(document.getElementById("crontab-help").textContent);

    $(".field-crontab_translation").hide();
    $(".field-crontab").on("change", () => {
        const help = $(".field-crontab .help");
        help.text(crontabHelp).append("<br>", document.createTextNode(`Translation: ${readableCrontabs[$("#id_crontab").val()]}`));
    });
}
